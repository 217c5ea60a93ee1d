"""The probes against the real ``GroupCoordinator`` of the installed release (in this process).

Verdicts are computed as on a ROCm host (the probes simulate it) and compared with what the
release is known to do; the probes must leave nothing behind and name what they cannot drive.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

import pytest
import torch
from packaging.version import Version

from sglang_aiter_plugin._status import FixState
from sglang_aiter_plugin.fixes.collectives import FUSED_AR_RMSNORM as FUSED
from sglang_aiter_plugin.fixes.collectives import REDUCE_SCATTER
from sglang_aiter_plugin.fixes.collectives.probe import (
    PROBED,
    CaptureCommunicator,
    Condition,
    ProbeError,
    parameters,
    probe,
)
from testkit.collective_facts import (
    FIRST_WITH_PATH,
    NEWEST_KNOWN,
    has_path,
    has_variants,
    honoured_upstream,
)
from testkit.collective_verdicts import verdicts

HOOKED = ("capture-all-gather", "capture-reduce-scatter", "capture-fused-ar-rmsnorm")


@pytest.fixture(scope="module")
def parallel_state():  # type: ignore[no-untyped-def]
    from sglang.srt.distributed import parallel_state

    return parallel_state


@pytest.fixture(scope="module")
def found(parallel_state):  # type: ignore[no-untyped-def]
    return verdicts()


@pytest.fixture
def known(sglang_version: Version) -> None:
    if sglang_version > NEWEST_KNOWN:
        pytest.skip(f"no recorded facts for sglang {sglang_version}")


@pytest.mark.parametrize("fix", HOOKED)
def test_verdict_is_what_the_release_is_known_to_need(known, found, fix: str,  # type: ignore[no-untyped-def]
                                                      sglang_version: Version) -> None:
    verdict = found[fix]
    if not has_path(fix, sglang_version):
        assert verdict.status.state is FixState.SKIPPED, verdict.status
        return
    assert verdict.status.state is FixState.APPLIED, verdict.status
    replay = {Condition.REPLAY} if has_variants(sglang_version) else set()
    assert set(verdict.ignored) == (set(PROBED) - honoured_upstream(fix, sglang_version)) | replay


def test_releases_without_a_path_say_why(found, sglang_version: Version) -> None:  # type: ignore[no-untyped-def]
    missing = [f for f in HOOKED if not has_path(f, sglang_version)]
    if not missing:
        pytest.skip(f"sglang {sglang_version} has every AITER path")
    reasons = {f: found[f].status.detail for f in missing}
    if "capture-reduce-scatter" in reasons:
        assert reasons["capture-reduce-scatter"] == (
            f"sglang {sglang_version} has no GroupCoordinator._maybe_aiter_reduce_scatter: no "
            "AITER reduce-scatter path to fix")
    if "capture-all-gather" in reasons:
        assert reasons["capture-all-gather"] == (
            f"sglang {sglang_version}'s GroupCoordinator._all_gather_into_tensor never calls "
            "aiter's communicator (it takes torch.distributed.all_gather_into_tensor): no AITER "
            "all-gather path")


def test_probe_leaves_no_trace(parallel_state) -> None:  # type: ignore[no-untyped-def]
    import torch

    module_before = dict(vars(parallel_state))
    class_before = dict(vars(parallel_state.GroupCoordinator))
    capturing_before = torch.cuda.is_current_stream_capturing
    environ_before = dict(os.environ)
    verdicts()
    after = vars(parallel_state)
    assert after.keys() == module_before.keys()
    assert all(after[k] is v for k, v in module_before.items())
    assert dict(vars(parallel_state.GroupCoordinator)) == class_before
    assert torch.cuda.is_current_stream_capturing is capturing_before
    assert dict(os.environ) == environ_before


def test_probe_looks_below_any_wrapper(parallel_state, sglang_version: Version) -> None:  # type: ignore[no-untyped-def]
    import functools

    name = FUSED.methods[0].name
    real = parallel_state.GroupCoordinator

    class Wrapped(real):  # type: ignore[misc, valid-type]
        pass

    original = vars(real)[name]

    @functools.wraps(original)
    def unregistered_always(self: Any, *args: Any) -> Any:
        return None

    setattr(Wrapped, name, unregistered_always)  # a wrapper that hides the registration
    assert probe(Wrapped, name, FUSED.invoke).ignored == PROBED


def test_probe_names_a_method_it_cannot_drive(parallel_state, sglang_version: Version) -> None:  # type: ignore[no-untyped-def]
    if sglang_version < FIRST_WITH_PATH["capture-reduce-scatter"]:
        pytest.skip("uses the reduce-scatter method (0.5.15+)")
    real = parallel_state.GroupCoordinator
    method = REDUCE_SCATTER.methods[0]

    class Raising(real):  # type: ignore[misc, valid-type]
        def _maybe_aiter_reduce_scatter(self, output: Any, input: Any) -> bool:
            raise KeyError("new_gate")

    class NeverCalls(real):  # type: ignore[misc, valid-type]
        def _maybe_aiter_reduce_scatter(self, output: Any, input: Any) -> bool:
            return False

    with pytest.raises(ProbeError, match=r"Raising\._maybe_aiter_reduce_scatter raised .*new_gate"):
        probe(Raising, method.name, REDUCE_SCATTER.invoke)
    with pytest.raises(ProbeError, match=r"made 0 call\(s\) on aiter's communicator \(none\)"):
        probe(NeverCalls, method.name, REDUCE_SCATTER.invoke)


def test_parameters_are_sglangs_own_below_any_wrapper() -> None:
    """A wrapper may claim any signature (``__signature__``); the parameters are the function's
    below every ``__wrapped__``."""
    def own(self, output, input): ...  # type: ignore[no-untyped-def]

    def wrapper(self, *args, **kwargs): ...  # type: ignore[no-untyped-def]

    wrapper.__wrapped__ = own  # type: ignore[attr-defined]
    wrapper.__signature__ = inspect.signature(lambda self, extra: None)  # type: ignore[attr-defined]
    holder = type("Holder", (), {"method": wrapper, "static": staticmethod(own)})
    assert parameters(holder, "method") == ("self", "output", "input")
    assert parameters(holder, "static") == ("self", "output", "input")


# -- the probe's aiter: ROCm/aiter e4048607's communicator during a stream capture -----------------


def test_the_probes_reduce_scatter_returns_none_even_when_it_ran() -> None:
    comm = CaptureCommunicator(register_flag=True)
    out = torch.empty((1, 8))
    assert comm.custom_reduce_scatter(torch.empty((2, 8)), out) is None
    assert comm.reduce_scatter(torch.empty((2, 8)), out, registered=True) is None
    assert comm.calls == [("custom_reduce_scatter", True), ("reduce_scatter", True)]


@pytest.mark.parametrize("closed", ["disabled", "should_custom_ar"])
def test_the_probes_all_reduce_has_aiters_gate(closed: str) -> None:
    comm = CaptureCommunicator(register_flag=True)
    x = torch.empty((1, 8))
    assert comm.custom_all_reduce(x, True, False) is x  # (inp, use_new, open_fp8_quant)
    if closed == "disabled":
        comm.disabled = True
    else:
        comm.should_custom_ar = lambda inp, *a, **k: False  # type: ignore[method-assign]
    assert comm.custom_all_reduce(x) is None  # no collective: nothing recorded
    assert comm.calls == [("custom_all_reduce", True)]


def test_the_probes_all_gather_allocates_the_output_it_is_not_given() -> None:
    comm = CaptureCommunicator(register_flag=True)
    x = torch.empty((3, 8), dtype=torch.int32)
    assert tuple(comm.all_gather_reg(x).shape) == (6, 8)
    assert tuple(comm.all_gather_unreg(x, None, -1).shape) == (3, 16)
    got = comm.custom_all_gather(x)
    assert (tuple(got.shape), got.dtype) == ((6, 8), torch.int32)
    given = torch.empty((6, 8), dtype=torch.int32)
    assert comm.all_gather_reg(x, out=given) is given


def test_the_probe_refuses_a_call_aiter_would_refuse() -> None:
    comm = CaptureCommunicator(register_flag=True)
    x = torch.empty((1, 8))
    with pytest.raises(TypeError):
        comm.custom_all_reduce(x, registered=True)  # aiter's all_reduce takes registered_input
    with pytest.raises(TypeError):
        comm.custom_fused_ar_rms(x, x, x, 1e-6)  # use_1stage has no default
    assert comm.calls == []


def test_the_probe_knows_aiters_further_fused_calls_and_their_counterparts() -> None:
    comm = CaptureCommunicator(register_flag=False)
    x, w = torch.empty((1, 128)), torch.empty(128)
    rope = (torch.empty((8, 64)), torch.empty(1), 64, 64)
    comm.custom_fused_ar_rms_quant(x, x, w, 1e-6, True)
    comm.custom_fused_ar_rms_mxfp4_quant(x, x, w, 1e-6)
    comm.custom_fused_qknorm_ar(x, w, w, 1e-6)
    comm.custom_fused_qknorm_ar_rope(x, w, w, *rope, 1e-6)
    comm.fused_ar_rms(x, x, w=w, eps=1e-6, registered=False, post_per_token_quant=True)
    comm.fused_ar_rms_mxfp4_quant(x, x, w=w, eps=1e-6, registered=True)
    comm.fused_qknorm_ar(x, w, w, 1e-6, True)  # registered, by position
    comm.fused_qknorm_ar_rope(x, w, w, *rope, 1e-6)
    comm.custom_fused_ar_rms_packed_input(x, x, w, 1e-6, True)
    assert comm.calls == [
        ("custom_fused_ar_rms_quant", True), ("custom_fused_ar_rms_mxfp4_quant", True),
        ("custom_fused_qknorm_ar", True), ("custom_fused_qknorm_ar_rope", True),
        ("fused_ar_rms", False), ("fused_ar_rms_mxfp4_quant", True), ("fused_qknorm_ar", True),
        ("fused_qknorm_ar_rope", False), ("custom_fused_ar_rms_packed_input", False)]
    comm.disabled = True
    assert comm.custom_fused_ar_rms_quant(x, x, w, 1e-6, True) is None
    assert len(comm.custom_fused_qknorm_ar(x, w, w, 1e-6)) == 3  # aiter's outputs, no collective
    assert len(comm.calls) == 9


def test_the_probes_gates_read_arguments_passed_by_name() -> None:
    comm = CaptureCommunicator(register_flag=False)
    x, out = torch.empty((2, 8)), torch.empty((1, 8))
    assert comm.custom_reduce_scatter(input=x, output=out, dim=0) is None
    assert comm.custom_all_reduce(input=x) is x
    assert comm.calls == [("custom_reduce_scatter", False), ("custom_all_reduce", False)]
