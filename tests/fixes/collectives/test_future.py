"""A future sglang: a method gone, its signature changed, or every condition honoured upstream.

The real ``GroupCoordinator`` of the installed release is used, on a simulated ROCm host; only
the methods under test are swapped (or deleted) for the duration of a test. In each case the fix
must install nothing and say why.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from sglang_aiter_plugin import FixState
from sglang_aiter_plugin._sglang import installed_sglang_version
from sglang_aiter_plugin.fixes.collectives import ALL_GATHER, FUSED_AR_RMSNORM, REDUCE_SCATTER
from sglang_aiter_plugin.fixes.collectives.fix import is_installed
from sglang_aiter_plugin.plugin.spec import FixContext
from testkit.doubles import future_collectives as future
from testkit.doubles.rocm_platform import simulated_rocm
from tests.fixes.collectives.scenario import METHODS


@pytest.fixture
def coordinator() -> Iterator[Any]:
    from sglang.srt.distributed.parallel_state import GroupCoordinator

    with simulated_rocm():
        yield GroupCoordinator
    assert not any(is_installed(GroupCoordinator, n) for n in METHODS), "a wrapper was installed"


def _apply(fix: Any) -> Any:
    context = FixContext(plugin_version="test", sglang_version=installed_sglang_version())
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
    coordinator: Any, monkeypatch: pytest.MonkeyPatch, fix: Any, swaps: dict[str, Any]
) -> None:
    for name, method in swaps.items():
        monkeypatch.setattr(coordinator, name, method, raising=False)
    status = _apply(fix)
    assert status.state is FixState.NOT_NEEDED, status
    assert "already capture" in status.detail
    for switch in ("SGLANG_MEMORY_SAVER_CUDA_GRAPH=1", "SGLANG_AITER_CAPTURE_COPY_IN=1",
                   "communicator enable_register_for_capturing=False"):
        assert switch in status.detail
