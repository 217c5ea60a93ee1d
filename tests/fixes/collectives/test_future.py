"""A future sglang: a method gone, its signature changed, every condition honoured upstream, or
a method calling one of aiter's further registering collectives.

The real ``GroupCoordinator`` of the installed release is used, on a simulated ROCm host; only
the methods under test are swapped (or deleted) for the duration of a test, or set on a subclass
of it. Where the fix cannot help it must install nothing and say why; where a method calls a
registering collective of aiter's that the collective table knows, it applies by behaviour.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from packaging.version import Version

from sglang_aiter_plugin import FixState
from sglang_aiter_plugin._ledger import Defect
from sglang_aiter_plugin._sglang import installed_sglang_version
from sglang_aiter_plugin.fixes.collectives import ALL_GATHER, FUSED_AR_RMSNORM, REDUCE_SCATTER
from sglang_aiter_plugin.fixes.collectives.fix import CollectiveFix, Method, calling_with
from sglang_aiter_plugin.fixes.collectives.wrappers import is_installed
from sglang_aiter_plugin.plugin.spec import FixContext
from testkit.collective_facts import has_variants
from testkit.doubles import future_collectives as future
from testkit.doubles.communicator import MARK, RecordingCommunicator
from testkit.doubles.rocm_platform import simulated_rocm
from tests.fixes.collectives.scenario import METHODS


@pytest.fixture
def coordinator() -> Iterator[Any]:
    from sglang.srt.distributed.parallel_state import GroupCoordinator

    with simulated_rocm():
        yield GroupCoordinator
    assert not any(is_installed(GroupCoordinator, n) for n in METHODS), "a wrapper was installed"


def _apply(fix: Any) -> Any:
    context = FixContext(sglang_version=installed_sglang_version())
    return fix.aiter_ext_apply_fix(context=context)


@pytest.mark.parametrize(("fix", "method"), [
    (ALL_GATHER, "_all_gather_into_tensor"),
    (REDUCE_SCATTER, "_maybe_aiter_reduce_scatter"),
    (FUSED_AR_RMSNORM, "fused_allreduce_rmsnorm"),
])
def test_method_removed_is_skipped(coordinator: Any, monkeypatch: pytest.MonkeyPatch,
                                   fix: Any, method: str) -> None:
    if method in vars(coordinator):
        monkeypatch.delattr(coordinator, method)
    status = _apply(fix)
    assert status.state is FixState.SKIPPED
    assert f"has no GroupCoordinator.{method}: no AITER" in status.detail


def test_changed_signature_is_skipped(coordinator: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(coordinator, "_maybe_aiter_reduce_scatter", future.with_an_extra_parameter,
                        raising=False)
    status = _apply(REDUCE_SCATTER)
    assert status.state is FixState.SKIPPED
    assert "changed GroupCoordinator._maybe_aiter_reduce_scatter to (self, output, input, dim)" \
        in status.detail
    assert status.detail.endswith("so it leaves sglang unchanged")


@pytest.mark.parametrize(("fix", "swaps"), [
    (ALL_GATHER, {"_all_gather_into_tensor": future.all_gather_honouring_every_switch}),
    (REDUCE_SCATTER, {"_maybe_aiter_reduce_scatter": future.reduce_scatter_honouring_every_switch}),
    (FUSED_AR_RMSNORM, {"fused_allreduce_rmsnorm": future.fused_honouring_every_switch,
                        "fused_allreduce_rmsnorm_quant_per_group":
                            future.quant_honouring_every_switch}),
], ids=["all-gather", "reduce-scatter", "fused"])
def test_upstream_honouring_every_switch_is_not_needed(
    coordinator: Any, monkeypatch: pytest.MonkeyPatch, fix: Any, swaps: dict[str, Any],
    sglang_version: Version
) -> None:
    """Where the release captures graph variants, ranks that may replay them apart remain: a
    method that follows the communicator flag is then fixed by turning the flag off for the
    capture (what sglang#36088 does in its dispatch)."""
    for name, method in swaps.items():
        monkeypatch.setattr(coordinator, name, method, raising=False)
    status = _apply(fix)
    switches = ("SGLANG_MEMORY_SAVER_CUDA_GRAPH=1", "SGLANG_AITER_CAPTURE_COPY_IN=1",
                "communicator enable_register_for_capturing=False")
    if has_variants(sglang_version):
        assert status.state is FixState.APPLIED, status
        # whether it registers follows the flag, which sglang (as #36088) may turn off: the
        # status claims no more than that
        assert " during capture while the communicator's enable_register_for_capturing is on " \
            "(read at each capture), despite ranks replaying different graphs (" in status.detail
        assert status.detail.endswith(f"sglang itself honours: {', '.join(switches)}")
        return
    assert status.state is FixState.NOT_NEEDED, status
    assert "already capture" in status.detail
    for switch in switches:
        assert switch in status.detail


# -- aiter's further fused calls, and calls a wrapper could not take off the registered path ------

X, W = torch.ones((1, 128)), torch.ones(128)
QKV, QW, KW = torch.ones((1, 192)), torch.ones(64), torch.ones(64)
ROPE = (torch.ones((16, 64)), torch.zeros(1, dtype=torch.long), 64, 64)


def _decided(fix: CollectiveFix, methods: dict[str, Any]) -> tuple[Any, type, CollectiveFix]:
    """``fix`` (a copy: its plan stays in the test) deciding on a ``GroupCoordinator`` of the
    installed release whose ``methods`` are these, as on ROCm: its status, the class (with the
    wrappers it installed) and the copy."""
    from sglang.srt.distributed.parallel_state import GroupCoordinator, envs

    cls = type("GroupCoordinator", (GroupCoordinator,), dict(methods))
    mine = copy.copy(fix)
    status = mine.decide_now(SimpleNamespace(GroupCoordinator=cls, envs=envs),
                             installed_sglang_version())
    return status, cls, mine


def _captured(cls: type, name: str, args: tuple[Any, ...], tms: bool,
              monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, bool]]:
    """What aiter's communicator (the double) runs when ``cls.name`` is called in a stream
    capture, with ``SGLANG_MEMORY_SAVER_CUDA_GRAPH`` set to ``tms``."""
    monkeypatch.setenv("SGLANG_MEMORY_SAVER_CUDA_GRAPH", "1" if tms else "0")
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    comm = RecordingCommunicator(capturing=True)
    coordinator: Any = object.__new__(cls)
    coordinator.ca_comm, coordinator.world_size = comm, 2
    assert getattr(coordinator, name)(*args) is not None
    return comm.calls


@pytest.mark.parametrize(("method", "unregistered"), [
    (future.fused_calling_per_token_quant, "fused_ar_rms"),
    (future.fused_calling_mxfp4_quant, "fused_ar_rms_mxfp4_quant"),
], ids=["custom_fused_ar_rms_quant", "custom_fused_ar_rms_mxfp4_quant"])
def test_fused_allreduce_rmsnorm_calling_aiters_further_fused_quant_is_fixed(
    coordinator: Any, monkeypatch: pytest.MonkeyPatch, method: Any, unregistered: str
) -> None:
    """sglang's method run on the simulated ROCm capture registers under every condition, so the
    fix applies; a capture under TMS then gets the unregistered counterpart, one without any
    condition keeps aiter's registered call."""
    status, cls, _ = _decided(FUSED_AR_RMSNORM, {"fused_allreduce_rmsnorm": method})
    assert status.state is FixState.APPLIED, status
    assert "despite SGLANG_MEMORY_SAVER_CUDA_GRAPH=1, SGLANG_AITER_CAPTURE_COPY_IN=1, " \
        "communicator enable_register_for_capturing=False" in status.detail
    args = (X, X, W, 1e-6)
    assert _captured(cls, "fused_allreduce_rmsnorm", args, True, monkeypatch) == [
        (unregistered, False)]
    assert _captured(cls, "fused_allreduce_rmsnorm", args, False, monkeypatch) == [
        (unregistered, True)]


@pytest.mark.parametrize(("method", "args", "unregistered"), [
    (future.qknorm_allreduce, (QKV, QW, KW, 1e-6), "fused_qknorm_ar"),
    (future.qknorm_rope_allreduce, (QKV, QW, KW, *ROPE, 1e-6), "fused_qknorm_ar_rope"),
], ids=["custom_fused_qknorm_ar", "custom_fused_qknorm_ar_rope"])
def test_a_new_method_calling_aiters_qknorm_all_reduce_is_fixed_once_a_fix_lists_it(
    coordinator: Any, monkeypatch: pytest.MonkeyPatch, method: Any, args: tuple[Any, ...],
    unregistered: str
) -> None:
    """No fix wraps a method sglang has not written yet (the canary names it); once a fix lists
    it, the collective table already has the unregistered counterpart."""
    name = method.__name__
    params = tuple(inspect.signature(method).parameters)
    shapes = tuple(tuple(a.shape) for a in args if isinstance(a, torch.Tensor))
    rest = tuple(a for a in args if not isinstance(a, torch.Tensor))
    listing = CollectiveFix(
        "fused qk-norm all-reduce", ledger=Defect("capture-qknorm", "-", (), "-", "-", "-", "-"),
        invoke=calling_with(*shapes, then=rest), methods=(Method(name, (params,)),),
        how="its unregistered form")
    status, cls, _ = _decided(listing, {name: method})
    assert status.state is FixState.APPLIED, status
    assert _captured(cls, name, args, True, monkeypatch) == [(unregistered, False)]
    assert _captured(cls, name, args, False, monkeypatch) == [(unregistered, True)]


def test_a_call_following_the_communicator_flag_is_fixed_by_turning_the_flag_off(
    coordinator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aiter's ``custom_all_gather`` registers per the communicator flag only: a capture under
    TMS gets the flag off for the call, so it takes ``all_gather_unreg``."""
    status, cls, _ = _decided(ALL_GATHER, {
        "_all_gather_into_tensor": future.all_gather_through_custom_all_gather})
    assert status.state is FixState.APPLIED, status
    monkeypatch.setattr(future, "is_hip", lambda: True)  # the module's name, as on ROCm
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    for tms, made in ((True, ("all_gather_unreg", False)), (False, ("all_gather_reg", True))):
        monkeypatch.setenv("SGLANG_MEMORY_SAVER_CUDA_GRAPH", "1" if tms else "0")
        comm = RecordingCommunicator(capturing=True)
        gathering: Any = object.__new__(cls)
        gathering.ca_comm = comm
        gathering._all_gather_into_tensor(torch.zeros((2, 8)), torch.ones((1, 8)))
        assert comm.calls == [made]
        assert comm.enable_register_for_capturing is True  # put back after the call


def test_a_call_without_an_unregistered_form_fails_instead_of_claiming_the_fix(
    coordinator: Any
) -> None:
    """A method that hands aiter's ``fused_ar_rms`` ``registered=True`` whatever the flag: the
    plugin has no form to hand a capture, so it must not report ``applied``."""
    status, cls, _ = _decided(FUSED_AR_RMSNORM, {
        "fused_allreduce_rmsnorm": future.fused_always_registered})
    assert status.state is FixState.FAILED, status
    assert "through aiter's fused_ar_rms, which has no unregistered form" in status.detail
    assert not is_installed(cls, "fused_allreduce_rmsnorm")


def test_an_all_gather_reading_the_output_aiter_allocates_is_probed_as_aiter_runs_it(
    coordinator: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """aiter's ``all_gather_reg`` allocates the output when given none: the probe must hand
    sglang's method that output (not ``None``) to see what it registers."""
    status, cls, _ = _decided(ALL_GATHER, {
        "_all_gather_into_tensor": future.all_gather_into_aiters_output})
    assert status.state is FixState.APPLIED, status
    assert "despite SGLANG_AITER_CAPTURE_COPY_IN=1, communicator " in status.detail
    from sglang.srt.distributed.parallel_state import envs

    monkeypatch.setattr(future, "is_hip", lambda: True)  # the module's names, as on ROCm
    monkeypatch.setattr(future, "envs", envs)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    comm = RecordingCommunicator(capturing=True, register_flag=False)
    gathering: Any = object.__new__(cls)
    gathering.ca_comm = comm
    out = torch.zeros((2, 8))
    gathering._all_gather_into_tensor(out, torch.ones((1, 8)))
    assert comm.calls == [("all_gather_unreg", False)]
    assert out[1, 0].item() == MARK
