"""Ranks that may replay different graphs (sglang#36071), through sglang's own capture loop.

The child (:mod:`.replay_scenario`) runs the installed release's decode capture loop on a
simulated ROCm host with the plugin loaded by ``load_plugins()``; each captured shape calls every
collective of a group spanning DP ranks (the full TP group) and of an attention-TP group, on two
ranks of different DP ranks. While sglang captures one of its graph variants under DP attention,
every collective of the spanning group must go unregistered on every rank; with one graph per
batch size, without DP attention, or in the attention-TP group, the registered path stays;
warm-up and eager calls are untouched. sglang#36088, simulated on the installed
release (``testkit.upstream_next``), leaves the all-reduce to sglang and the other collectives to
the plugin, and the plugin says so; sglang#36079 leaves it nothing to do, and it says so.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from sglang_aiter_plugin._status import FixState
from sglang_aiter_plugin.fixes.collectives import ALL_REDUCE, registered, replay
from sglang_aiter_plugin.fixes.collectives.wrappers import all_reduce_unregistered
from testkit.collective_facts import FIRST_WITH_VARIANTS, has_path, has_variants
from testkit.doubles.communicator import RecordingCommunicator
from tests.fixes.collectives.replay_scenario import child_data

REGISTERED = {"capture-all-reduce": ["custom_all_reduce", True],
              "capture-all-gather": ["all_gather_reg", True],
              "capture-reduce-scatter": ["reduce_scatter", True],
              "capture-fused-ar-rmsnorm": ["custom_fused_ar_rms", True]}
UNREGISTERED = {"capture-all-reduce": ["custom_all_reduce", False],
                "capture-all-gather": ["all_gather_unreg", False],
                "capture-reduce-scatter": ["reduce_scatter", False],
                "capture-fused-ar-rmsnorm": ["fused_ar_rms", False]}
EAGER = [["custom_all_reduce", False], ["all_gather_unreg", False], ["reduce_scatter", False],
         ["custom_fused_ar_rms", False]]


@pytest.fixture(scope="module")
def variants(sglang_version: Version) -> None:
    if not has_variants(sglang_version):
        pytest.skip(f"sglang {sglang_version} captures one graph per batch size (graph variants "
                    f"from {FIRST_WITH_VARIANTS})")


@pytest.fixture(scope="module")
def data(variants: None) -> Any:
    return child_data()


def _want(table: dict[str, list[Any]], version: Version) -> list[list[Any]]:
    return [call for fix, call in table.items() if has_path(fix, version)]


def _captures(data: Any, scenario: str) -> list[tuple[str, dict[str, Any]]]:
    ranks = data["results"][scenario]["ranks"]
    return [(rank, c) for rank, run in ranks.items() for c in run["captures"]]


def test_every_variant_is_captured_on_every_rank(data: Any) -> None:
    for rank in ("0", "2"):
        found = {(c["bs"], c["variant"], c["group"]) for r, c in _captures(data, "variants+dp")
                 if r == rank}
        assert found == {(bs, v, g) for bs in (1, 2) for v in ("dense", "sparse")
                         for g in ("tp", "attention_tp")}


def test_a_group_spanning_dp_ranks_captures_no_registered_collective_in_a_variant(
        data: Any, sglang_version: Version) -> None:
    """Every collective of the full TP group goes through the communicator's own buffer, in
    every variant, on both DP ranks (today's main registers all four)."""
    for rank, capture in _captures(data, "variants+dp"):
        if capture["group"] == "tp":
            assert capture["captured"] == _want(UNREGISTERED, sglang_version), (rank, capture)


def test_the_attention_tp_group_keeps_the_registered_path(data: Any,
                                                         sglang_version: Version) -> None:
    for rank, capture in _captures(data, "variants+dp"):
        if capture["group"] == "attention_tp":
            assert capture["captured"] == _want(REGISTERED, sglang_version), (rank, capture)


@pytest.mark.parametrize("scenario", ["one-graph+dp", "variants"],
                         ids=["one-graph-per-size", "no-dp-attention"])
def test_elsewhere_the_registered_path_stays(data: Any, scenario: str,
                                            sglang_version: Version) -> None:
    captures = _captures(data, scenario)
    assert captures
    for rank, capture in captures:
        assert capture["captured"] == _want(REGISTERED, sglang_version), (rank, capture)


@pytest.mark.parametrize("scenario", ["variants+dp", "one-graph+dp", "variants", "36088"])
def test_warm_up_and_eager_calls_are_untouched(data: Any, scenario: str,
                                               sglang_version: Version) -> None:
    eager = [call for call in EAGER if call[0] != "all_gather_unreg"
             or has_path("capture-all-gather", sglang_version)]
    eager = [call for call in eager if call[0] != "reduce_scatter"
             or has_path("capture-reduce-scatter", sglang_version)]
    for rank, run in data["results"][scenario]["ranks"].items():
        assert all(c["warm-up"] == [] for c in run["captures"]), rank  # aiter's warm-up zeros
        assert run["eager"] == {"tp": eager, "attention_tp": eager}, rank


def test_the_plugin_says_once_what_it_did(data: Any) -> None:
    said = data["results"]["variants+dp"]["said"]
    acted = [line for line in said if "may replay apart (sglang#36071)" in line]
    assert acted == ["sglang-aiter-plugin: group tp:0, which spans DP ranks under DP attention, "
                     "captures graph variant 'dense', which its ranks may replay apart "
                     "(sglang#36071): its collectives take the unregistered (copy-in) path in "
                     "these captures"]


def test_with_sglang_36088_sglang_captures_unregistered_and_the_plugin_says_so(
        data: Any, sglang_version: Version) -> None:
    """sglang's dispatch builds the communicators with registration during capture off: its
    all-reduce follows that; all-gather, reduce-scatter and the fused form ignore the flag, so
    the plugin's existing communicator-flag condition takes them, as without the variants."""
    run = data["results"]["36088"]
    for rank, capture in _captures(data, "36088"):
        assert capture["captured"] == _want(UNREGISTERED, sglang_version), (rank, capture)
    assert not any("(sglang#36071)" in line for line in run["said"])
    others = sorted(fix.name for fix in registered() if fix is not ALL_REDUCE
                    and data["statuses"][fix.name][0] == FixState.APPLIED.value)
    assert len(others) == 3  # all-gather, reduce-scatter and the fused form: the plugin's doing
    assert [line for line in run["said"] if "leaves that to sglang" in line] == [
        "sglang-aiter-plugin: group tp:0, which spans DP ranks under DP attention, captures "
        "graph variant 'dense', which its ranks may replay apart; the communicator's "
        "enable_register_for_capturing is off, so sglang captures its all-reduce unregistered "
        f"itself and {ALL_REDUCE.name} leaves that to sglang; {', '.join(others)} still take "
        "their collectives off the registered path where their statuses say sglang ignores "
        "that flag"]


def test_with_sglang_36079_there_is_nothing_to_do_and_the_plugin_says_so(
        data: Any, sglang_version: Version) -> None:
    run = data["results"]["36079"]
    if run is None:
        pytest.skip(f"sglang {sglang_version} decides its dual graphs in the decode graph "
                    "runner's __init__, which the capture-loop test does not run")
    for rank, capture in _captures(data, "36079"):
        assert capture["variant"] is None
        assert capture["captured"] == _want(REGISTERED, sglang_version), (rank, capture)
    assert run["said"] == [
        "sglang-aiter-plugin: group tp:0, which spans DP ranks under DP attention, captures one "
        "graph per batch size (sglang marks no graph variant): its ranks replay the same graph, "
        "so its collectives keep the registered path"]


def test_the_all_reduce_fix_is_applied_for_the_condition(data: Any) -> None:
    state, detail = data["statuses"]["capture-all-reduce"]
    assert state == FixState.APPLIED.value
    assert "ranks replaying different graphs (graph variants, marked by get_capture_" in detail


@pytest.mark.parametrize("flag", [True, False, None])
def test_the_unregistered_all_reduce_puts_the_communicators_flag_back(flag: bool | None) -> None:
    import torch

    comm = RecordingCommunicator(capturing=True, register_flag=flag)
    torch_capturing = torch.cuda.is_current_stream_capturing
    torch.cuda.is_current_stream_capturing = lambda: True
    try:
        all_reduce_unregistered(comm, torch.ones((1, 8)))
    finally:
        torch.cuda.is_current_stream_capturing = torch_capturing
    assert comm.calls == [("custom_all_reduce", False)] if flag is not None else [
        ("custom_all_reduce", True)]  # an aiter without the flag cannot be told
    assert getattr(comm, "enable_register_for_capturing", None) == flag


# 0.5.18-0.5.19 mark the DSA variant with get_capture_dsa_variant; no CI release has that marker,
# so these run a capture-mode module (made here) that defines only it.
DSA_MARKER = "get_capture_dsa_variant"


def _capture_mode_with_only(marker: str, label: str | None) -> types.ModuleType:
    module = types.ModuleType(replay.CAPTURE_MODE)
    setattr(module, marker, lambda: label)
    return module


def test_the_dsa_marker_of_0_5_18_is_recognised_in_an_imported_capture_mode() -> None:
    module = _capture_mode_with_only(DSA_MARKER, None)
    assert replay.variant_marker(module) == DSA_MARKER
    possible, why = replay.replay_possible(module)
    assert possible
    assert f"marked by {DSA_MARKER}" in why


def test_the_dsa_marker_of_0_5_18_is_recognised_in_the_capture_mode_source(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Where sglang has not imported its capture-mode module yet, its source is read."""
    source = tmp_path.joinpath(*replay.CAPTURE_MODE.split(".")[2:]).with_suffix(".py")
    source.parent.mkdir(parents=True)
    source.write_text(f"import torch\n\ndef {DSA_MARKER}():\n    return _variant\n")
    monkeypatch.delitem(sys.modules, replay.CAPTURE_MODE, raising=False)
    monkeypatch.setitem(sys.modules, "sglang.srt", types.SimpleNamespace(__path__=[str(tmp_path)]))
    assert replay.variant_marker() == DSA_MARKER
    assert replay.replay_possible()[0]


def test_a_dsa_variant_marked_by_0_5_18s_marker_takes_the_unregistered_path(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The capture-time check reads the variant through the same marker: under DP attention, a
    group spanning DP ranks captures it unregistered; the attention-TP group does not."""
    monkeypatch.setitem(sys.modules, replay.CAPTURE_MODE,
                        _capture_mode_with_only(DSA_MARKER, "sparse"))
    monkeypatch.setitem(sys.modules, replay.DP_ATTENTION,
                        types.SimpleNamespace(is_dp_attention_enabled=lambda: True))
    attention = types.SimpleNamespace(ranks=[0, 1])
    monkeypatch.setitem(sys.modules, replay.RUNTIME_CONTEXT, types.SimpleNamespace(
        get_parallel=lambda: types.SimpleNamespace(attn_tp_group=attention)))
    monkeypatch.setattr(replay, "SAID", set())
    check = replay.ReplayCheck(parallel_state=None)
    comm = RecordingCommunicator(capturing=True)
    assert check.variant() == "sparse"
    assert check(types.SimpleNamespace(ranks=[0, 1, 2, 3], unique_name="tp:0"), comm)
    assert not check(attention, comm)
