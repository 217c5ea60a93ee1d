"""The behaviour probe against the real ``GroupCoordinator`` of the installed sglang release."""

from __future__ import annotations

import os
from typing import Any

import pytest
from packaging.version import Version

from sglang_aiter_plugin.fixes.reduce_scatter_probe import METHOD, ProbeError, Switch, probe
from tests.fixes.reduce_scatter_facts import FIRST_WITH_METHOD, NEWEST_KNOWN, honoured_upstream


@pytest.fixture(scope="module")
def parallel_state():  # type: ignore[no-untyped-def]
    from sglang.srt.distributed import parallel_state

    return parallel_state


@pytest.fixture
def has_method(sglang_version: Version) -> None:
    if sglang_version < FIRST_WITH_METHOD:
        pytest.skip(f"sglang {sglang_version} has no GroupCoordinator.{METHOD} (added in 0.5.15)")


def test_probe_finds_what_this_release_ignores(has_method, parallel_state,  # type: ignore[no-untyped-def]
                                               sglang_version: Version) -> None:
    if sglang_version > NEWEST_KNOWN:
        pytest.skip(f"no recorded facts for sglang {sglang_version}")
    result = probe(parallel_state.GroupCoordinator)
    assert result.baseline is True  # the fast path registers
    assert set(result.honoured) == honoured_upstream(sglang_version)
    assert set(result.ignored) == set(Switch) - honoured_upstream(sglang_version)
    assert Switch.COMM_FLAG in result.ignored  # no release up to 0.5.23 reads aiter's flag


def test_probe_looks_below_the_plugins_own_hook(has_method, plugins_loaded,  # type: ignore[no-untyped-def]
                                                parallel_state) -> None:
    hooked = parallel_state.GroupCoordinator.__dict__[METHOD]
    assert hasattr(hooked, "__wrapped__"), "load_plugins() applied the hook"
    assert probe(parallel_state.GroupCoordinator).ignored  # not hidden by the hook


def test_probe_leaves_no_trace(has_method, parallel_state) -> None:  # type: ignore[no-untyped-def]
    import torch

    module_before = dict(vars(parallel_state))
    capturing_before = torch.cuda.is_current_stream_capturing
    environ_before = dict(os.environ)
    probe(parallel_state.GroupCoordinator)
    after = vars(parallel_state)
    assert after.keys() == module_before.keys()
    assert all(after[k] is v for k, v in module_before.items())
    assert torch.cuda.is_current_stream_capturing is capturing_before
    assert dict(os.environ) == environ_before


def test_probe_names_a_method_it_cannot_drive(has_method, parallel_state) -> None:  # type: ignore[no-untyped-def]
    real = parallel_state.GroupCoordinator

    class Raising(real):  # type: ignore[misc, valid-type]
        def _maybe_aiter_reduce_scatter(self, output: Any, input: Any) -> bool:
            raise KeyError("new_gate")

    class NeverHandles(real):  # type: ignore[misc, valid-type]
        def _maybe_aiter_reduce_scatter(self, output: Any, input: Any) -> bool:
            return False

    with pytest.raises(ProbeError, match=r"Raising\._maybe_aiter_reduce_scatter raised .*new_gate"):
        probe(Raising)
    with pytest.raises(ProbeError, match=r"returned False and called reduce_scatter 0 time"):
        probe(NeverHandles)


def test_probe_of_a_release_without_the_method(parallel_state, sglang_version: Version) -> None:  # type: ignore[no-untyped-def]
    if sglang_version >= FIRST_WITH_METHOD:
        pytest.skip(f"sglang {sglang_version} has the method; this is for 0.5.11-0.5.14")
    with pytest.raises(AttributeError):
        probe(parallel_state.GroupCoordinator)
