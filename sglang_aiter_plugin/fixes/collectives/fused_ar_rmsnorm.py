"""Fix ``capture-fused-ar-rmsnorm``: the fused all-reduce + RMSNorm registers nothing when unsafe.

Patches:
    ``sglang.srt.distributed.parallel_state:GroupCoordinator.fused_allreduce_rmsnorm`` and, from
    sglang 0.5.17, ``...:GroupCoordinator.fused_allreduce_rmsnorm_quant_per_group``
Why:
    With fusion on (``--enable-aiter-allreduce-fusion``; sglang 0.5.21+ turns it on by itself for
    GLM-DSA models on HIP), sglang calls aiter's ``custom_fused_ar_rms`` (and
    ``custom_fused_ar_rms_per_group_quant``), which during a stream capture pass
    ``registered=True`` whatever the switches: the caller's input is IPC-exported when the
    capture ends. Memory that cannot be exported (torch_memory_saver under
    ``SGLANG_MEMORY_SAVER_CUDA_GRAPH=1``, PyTorch expandable segments, where aiter turns its
    ``enable_register_for_capturing`` off) aborts with ``invalid device pointer``, and
    ``SGLANG_AITER_CAPTURE_COPY_IN=1`` is not honoured. No release honours any of the three.
How:
    The probe finds which switches the installed methods ignore; if any, a wrapper hands
    sglang's method, during a stream capture with one of them on, a communicator whose
    ``custom_fused_ar_rms`` is the unregistered form sglang's own piecewise-graph branch uses,
    ``fused_ar_rms(..., registered=False)`` (and ``fused_ar_rms_per_group_quant(...,
    registered=False)``), where the communicator has it; where it does not, the call gives
    ``None``, what sglang's method returns when fusion is unavailable, and sglang runs its
    unfused all-reduce (which honours the switches) and RMSNorm. Which of the two a process took
    is logged once, at its first such capture. Otherwise the capture keeps the registered fast
    path; warm-up, piecewise-graph and eager calls are sglang's own.
Upstream PR:
    None yet (neither in sglang nor in aiter's ``custom_fused_ar_rms``).
Remove when:
    The oldest supported sglang (or the aiter it requires) honours all three switches here: the
    probe then reports ``not needed`` (``tests/fixes/collectives/test_tripwires.py`` fails on
    such a release and says so).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sglang_aiter_plugin._status import FixStatus
from sglang_aiter_plugin.fixes.collectives.fix import Collective, Method, apply
from sglang_aiter_plugin.fixes.collectives.hook import Hook
from sglang_aiter_plugin.plugin import hookimpl
from sglang_aiter_plugin.plugin.spec import FixContext

__all__ = ["COLLECTIVE", "NAME", "aiter_ext_apply_fix"]

NAME = "capture-fused-ar-rmsnorm"
HOOK = Hook(NAME, "UnregisteredFusedArRms")
_FUSED = ("self", "input_", "residual_inp_", "weight_", "eps")
_QUANT = (*_FUSED, "group_size", "emit_bf16")
_HIDDEN = 128  # a multiple of the per-group quant's group size


def _invoke(method: Callable[..., Any], coordinator: Any) -> Any:
    import torch

    x = torch.empty((1, _HIDDEN))
    return method(coordinator, x, torch.empty((1, _HIDDEN)), torch.empty(_HIDDEN), 1e-6)


def _wrap_fused(original: Callable[..., Any], hook: Hook) -> Callable[..., Any]:
    def fused_allreduce_rmsnorm(self: Any, input_: Any, residual_inp_: Any, weight_: Any,
                                eps: float) -> Any:
        comm = getattr(self, "ca_comm", None)
        if comm is None or not getattr(comm, "_IS_CAPTURING", False):
            return original(self, input_, residual_inp_, weight_, eps)
        return original(hook.view_for(self, comm), input_, residual_inp_, weight_, eps)

    return fused_allreduce_rmsnorm


def _wrap_quant(original: Callable[..., Any], hook: Hook) -> Callable[..., Any]:
    def fused_allreduce_rmsnorm_quant_per_group(self: Any, *args: Any, **kwargs: Any) -> Any:
        comm = getattr(self, "ca_comm", None)
        if comm is None or not getattr(comm, "_IS_CAPTURING", False):
            return original(self, *args, **kwargs)
        return original(hook.view_for(self, comm), *args, **kwargs)

    return fused_allreduce_rmsnorm_quant_per_group


COLLECTIVE = Collective(
    fix=NAME,
    title="fused all-reduce+RMSNorm",
    methods=(
        Method("fused_allreduce_rmsnorm", (_FUSED,), _invoke, _wrap_fused),
        Method("fused_allreduce_rmsnorm_quant_per_group", (_QUANT, (*_QUANT, "transpose_scale")),
               _invoke, _wrap_quant, optional=True),
    ),
    hook=HOOK,
    how="a wrapper gives those captures the communicator's unregistered form "
        "(fused_ar_rms(registered=False)) where it has one, else None so that sglang runs its "
        "unfused all-reduce and RMSNorm (logged at the first such capture)",
)


@hookimpl
def aiter_ext_apply_fix(context: FixContext) -> FixStatus:
    return apply(COLLECTIVE, context.sglang_version, context.report)
