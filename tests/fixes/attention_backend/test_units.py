"""Resolution steps a tiny launch cannot reach here, run on their own after the plugin's fold.

Kimi-K3 with decode context parallelism needs aiter's gluon kernels (checked by a probe that is
replaced here) and writes the literal ``"aiter"`` back into the configuration; ``aiter-ext``
must come out of it exactly as ``aiter`` does.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from sglang_aiter_plugin.fixes.attention_backend.choice import fold, fold_point
from testkit.doubles.rocm_platform import rocm_host


def _folded_record(backend: str, **fields: Any) -> Any:
    from sglang.srt.server_args import ServerArgs

    with rocm_host():  # the fold refuses aiter-ext on a host without ROCm and aiter
        record = ServerArgs(model_path="dummy", attention_backend=backend, **fields)
        if fold_point(ServerArgs) == "resolve_once":  # older releases folded in __post_init__
            fold(record, declare=True)
    return record


def _outcome(fn: Any, *args: Any) -> Any:
    try:
        return fn(*args)
    except Exception as exc:
        return (type(exc).__name__, str(exc))


@pytest.mark.usefixtures("plugins_loaded")
def test_kimi_k3_dcp_overrides_match(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        kimi = importlib.import_module("sglang.srt.arg_groups.model_overrides.kimi_k3")
    except ImportError:
        pytest.skip("no Kimi-K3 model overrides in this sglang release")
    overrides = getattr(kimi, "_kimi_k3_overrides", None)
    probe = "_require_kimi_k3_aiter_gluon_dcp_support"
    if overrides is None or not hasattr(kimi, probe):
        pytest.skip("this sglang release has no Kimi-K3 aiter DCP path")
    monkeypatch.setattr(kimi, probe, lambda: None)  # aiter's gluon kernels cannot exist here
    stock = _outcome(overrides, _folded_record("aiter", dcp_size=2), None)
    ext = _outcome(overrides, _folded_record("aiter-ext", dcp_size=2), None)
    assert ext == stock
    assert stock["decode_attention_backend"] == "aiter"


def test_a_later_launch_without_the_choice_removes_what_an_earlier_one_wrote(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two engines in one process: the second (aiter) must not inherit the first's choice."""
    import os
    from types import SimpleNamespace

    from sglang_aiter_plugin.fixes.attention_backend import choice as marker
    from sglang_aiter_plugin.fixes.attention_backend.choice import MARKER_ATTR, SELECTED_ENV

    monkeypatch.delenv(SELECTED_ENV, raising=False)
    first, second = SimpleNamespace(), SimpleNamespace()
    marker.record(first, selected=True)
    assert os.environ[SELECTED_ENV] == "1"
    marker.record(second, selected=False)
    assert SELECTED_ENV not in os.environ
    assert getattr(first, MARKER_ATTR) == "aiter-ext"
    assert not hasattr(second, MARKER_ATTR)
    assert not marker.is_selected(second)
