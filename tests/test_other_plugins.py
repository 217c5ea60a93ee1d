"""Another plugin on the symbols the plugin wraps: ``doctor``'s ``other plugins`` row names it,
with sglang's load order and the outermost wrapper, and the capture conditions still hold inside.

The other plugin is a double of ROCm/ATOM's (:mod:`testkit.doubles.atom_plugin`): a test-only
distribution whose ``register()`` wraps ``GroupCoordinator.graph_capture`` to enter aiter's own
group's capture around sglang's, and the decode graph runner's per-shape capture. Beside it, a
ROCm-host double is loaded first (sglang's platform probes answer as on an MI300X, so the
plugin's collective fixes decide), and ``SGLANG_AITER_CAPTURE_COPY_IN=1`` is the condition. sglang
loads plugins in entry-point discovery order (``sys.path``), ``SGLANG_PLUGINS`` only filtering,
so the folders' order on ``PYTHONPATH`` sets which ``register()`` runs first: both orders run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sglang_aiter_plugin import _doctor
from sglang_aiter_plugin._other_plugins import summaries
from testkit.doubles import atom_plugin
from testkit.subproc import run_python

ROOT = Path(__file__).resolve().parents[1]
ORDERS = {  # the folders on PYTHONPATH, first to last -> the order sglang's loader calls them
    "plugin first": ("rocm", "ext", "atom"),
    "other first": ("rocm", "atom", "ext"),
}
CALLED = {"plugin first": "test_rocm, aiter_ext, atom_like",
          "other first": "test_rocm, atom_like, aiter_ext"}


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return atom_plugin.site_dirs(tmp_path_factory.mktemp("plugins"))


def _env(site: dict[str, Path], order: str, **extra: str) -> dict[str, str]:
    path = [str(site[name]) for name in ORDERS[order]]  # before the release under test's
    rest = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    return {"PYTHONPATH": os.pathsep.join(dict.fromkeys([*path, *filter(None, rest),
                                                          str(ROOT)])),
            "SGLANG_AITER_CAPTURE_COPY_IN": "1", **extra}


def _doctor_rows(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> list[_doctor.Check]:
    """``doctor``'s discovery probe in a fresh interpreter with ``env``, and the rows it gives."""
    full = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    full.update(env)
    proc = subprocess.Popen([sys.executable, "-c", _doctor._DISCOVERY_PROBE],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full)
    for name, value in env.items():
        if name.startswith("SGLANG_"):
            monkeypatch.setenv(name, value)
    report = _doctor.Report()
    answers: dict[str, Any] = {}
    assert _doctor._check_discovery(report, proc, answers)
    _doctor._other_plugins(report, answers)
    return [c for c in report.checks if c.name == "other plugins"]


def _decode_capture() -> str:
    """The decode graph runner's per-shape capture in the release under test."""
    from importlib.util import find_spec

    for module, cls, name in atom_plugin.DECODE_CAPTURES:
        try:
            if find_spec(module) is not None:
                return f"{cls}.{name}"
        except ModuleNotFoundError:  # its package is not in this release
            continue
    raise AssertionError("no decode graph runner known in this sglang")


@pytest.mark.slow
@pytest.mark.parametrize("order", list(ORDERS))
def test_doctor_names_the_other_plugin_the_order_and_the_outermost_wrapper(
        site: dict[str, Path], order: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # the allow-list names the plugins in the other order: it filters, sglang's order stays
    allow = "aiter_ext,atom_like,test_rocm" if order == "other first" else ""
    rows = _doctor_rows(_env(site, order, SGLANG_PLUGINS=allow), monkeypatch)
    assert [r.level for r in rows] == ["warn"]
    text = rows[0].summary
    assert text.startswith(f"atom_like also wraps GroupCoordinator.graph_capture, "
                           f"{_decode_capture()} (through its register()). ")
    assert f"sglang's loader calls register() in this order: {CALLED[order]} " in text
    assert ("SGLANG_PLUGINS=aiter_ext,atom_like,test_rocm only filters, it does not order"
            if allow else "SGLANG_PLUGINS is unset, so every plugin of the group loads") in text
    assert "so it loads both" in text
    nesting = {"plugin first": "GroupCoordinator.graph_capture: atom_like's wrapper is "
                               "outermost, the plugin's (capture-all-reduce) inside it",
               "other first": "GroupCoordinator.graph_capture: the plugin's wrapper "
                              "(capture-all-reduce) is outermost, atom_like's inside it"}
    assert nesting[order] in text
    assert "the plugin's capture conditions still apply to everything run in the capture's body" \
        in text
    assert (f"{_decode_capture()}: sglang calls it inside GroupCoordinator.graph_capture, so "
            "atom_like's wrapper runs within the plugin's whole-capture scope; the plugin wraps "
            "graph_capture here, so under a capture condition atom_like's wrapper sees aiter's "
            "registration flag off") in text


@pytest.mark.slow
def test_without_another_plugin_on_the_symbols_the_row_says_so(
        site: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """The allow-list leaves the other plugin out: sglang never runs its register()."""
    rows = _doctor_rows(_env(site, "other first", SGLANG_PLUGINS="test_rocm,aiter_ext"),
                        monkeypatch)
    assert [r.level for r in rows] == ["ok"]
    assert rows[0].summary.startswith("no other plugin of sglang.srt.plugins wraps what the "
                                      "plugin wraps (GroupCoordinator.graph_capture, ")
    assert "in a fresh process (test_rocm, aiter_ext)" in rows[0].summary


CAPTURE = """
from contextlib import nullcontext
from types import SimpleNamespace
import torch
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.distributed import parallel_state as ps
from sglang_aiter_plugin._patch import patches
from testkit.doubles import atom_plugin
from testkit.doubles.communicator import RecordingCommunicator

stream = {"capturing": False}
torch.cuda.is_current_stream_capturing = lambda: stream["capturing"]
STREAM = SimpleNamespace(wait_stream=lambda other: None)
ps.get_current_device_stream_fast = lambda: STREAM  # graph_capture waits on no other stream

tp = object.__new__(ps.GroupCoordinator)
tp.ca_comm = RecordingCommunicator(capturing=False)
tp.world_size, tp.ranks, tp.unique_name = 2, [0, 1], "tp:0"
tp.device_module = SimpleNamespace(stream=lambda s: nullcontext())
for absent in ("qr_comm", "pymscclpp_comm", "torch_symm_mem_comm", "pynccl_comm",
               "pcie_ipc_comm"):
    setattr(tp, absent, None)

installed = ps.GroupCoordinator.graph_capture
with tp.graph_capture(stream=STREAM):
    body = {"flag": getattr(tp.ca_comm, atom_plugin.FLAG),
            "aiter group capturing": atom_plugin.AITER_GROUP._IS_CAPTURING,
            "aiter group flag": getattr(atom_plugin.AITER_GROUP, atom_plugin.FLAG)}
    stream["capturing"] = True
    try:
        tp._all_reduce_out_place(torch.ones((1, 8)), "ca")
    finally:
        stream["capturing"] = False
print("RESULT " + json.dumps({
    "outermost": "atom_like" if installed is atom_plugin.installed["graph_capture"]
                 else patches(installed)[:1],
    "ours": patches(installed),
    "events": atom_plugin.events, "body": body, "calls": [list(c) for c in tp.ca_comm.calls],
    "after": [getattr(tp.ca_comm, atom_plugin.FLAG), type(tp.ca_comm) is RecordingCommunicator],
}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("order", list(ORDERS))
def test_the_capture_conditions_hold_inside_whichever_wraps_outermost(
        site: dict[str, Path], order: str) -> None:
    """sglang's own graph_capture of a TP group (the communicator double, copy-in): its body
    reads the registration flag off and the all-reduce captures unregistered in both orders;
    the other plugin's wrapper sees the flag off where it wraps the plugin's, and its own
    group's communicator (aiter's, not sglang's) is left as it is."""
    result = run_python(CAPTURE, env=_env(site, order)).data
    assert result["outermost"] == ("atom_like" if order == "plugin first"
                                   else ["capture-all-reduce"])
    assert "capture-all-reduce" in result["ours"]  # reached below the other plugin's wrapper
    assert result["body"] == {"flag": False, "aiter group capturing": True,
                              "aiter group flag": True}
    assert result["calls"] == [["custom_all_reduce", False]]
    assert result["after"] == [True, True]
    inside = order == "plugin first"  # the plugin's scope opens within the other's wrapper
    assert result["events"] == [["entering", True], ["entered", not inside], ["left", True]]


def test_a_wrapper_that_replaces_without_calling_through_is_said_to_stop_the_conditions() -> None:
    """A HookRegistry REPLACE above the plugin's wrapper: it is never reached."""
    symbol = {"symbol": "GroupCoordinator.graph_capture", "inside": None, "reaches_sglang": True,
              "layers": [{"by": "other", "how": "a replace hook of sglang's HookRegistry",
                          "calls_inside": False},
                         {"by": "aiter_ext", "how": "capture-all-reduce", "calls_inside": True}]}
    warnings, _ = summaries({"order": ["aiter_ext", "other"], "symbols": [symbol]}, None)
    assert len(warnings) == 1
    assert ("GroupCoordinator.graph_capture: other's hook replaces the function without calling "
            "what lies below, so the plugin's wrapper is never reached: its capture conditions "
            "do not apply there") in warnings[0]


def test_with_no_other_wrapper_there_is_no_warning() -> None:
    symbol = {"symbol": "GroupCoordinator.graph_capture", "inside": None, "reaches_sglang": True,
              "layers": [{"by": "aiter_ext", "how": "capture-all-reduce", "calls_inside": True}]}
    warnings, ok = summaries({"order": ["aiter_ext", "other"], "symbols": [symbol]}, None)
    assert warnings == []
    assert ok.startswith("no other plugin of sglang.srt.plugins wraps what the plugin wraps "
                         "(GroupCoordinator.graph_capture)")
