"""Fix ``capture-reduce-scatter``: no IPC registration of a reduce-scatter's input when unsafe.

Patches:
    ``sglang.srt.distributed.parallel_state:GroupCoordinator._maybe_aiter_reduce_scatter``
Why:
    While a stream captures a CUDA graph, sglang's AITER reduce-scatter (0.5.15+,
    ``SGLANG_DP_USE_REDUCE_SCATTER``, on by default on HIP) calls aiter's ``reduce_scatter``
    with ``registered=True``: the kernel reads the caller's input directly and aiter IPC-exports
    that pointer when the capture ends. Memory that cannot be exported (torch_memory_saver under
    ``SGLANG_MEMORY_SAVER_CUDA_GRAPH=1``, PyTorch expandable segments) aborts the process with
    ``invalid device pointer``. sglang 0.5.15-0.5.17 always register; 0.5.18-0.5.21 honour TMS;
    0.5.22+ also ``SGLANG_AITER_CAPTURE_COPY_IN``; no release reads aiter's
    ``enable_register_for_capturing`` here (aiter's own ``custom_reduce_scatter`` would).
How:
    The probe finds which switches the installed method ignores; if any, a wrapper hands
    sglang's method, during a stream capture with one of them on, a communicator whose
    ``reduce_scatter`` always passes ``registered=False`` (the input is copied into aiter's
    pre-registered buffer). Otherwise the capture keeps ``registered=True``; warm-up,
    piecewise-graph and eager calls are sglang's own.
Upstream PR:
    sgl-project/sglang#34203 (``SGLANG_MEMORY_SAVER_CUDA_GRAPH``, in 0.5.18); copy-in came with
    0.5.22. The communicator flag has no upstream change yet.
Remove when:
    The oldest supported sglang honours all three switches here: the probe then reports
    ``not needed`` (``tests/fixes/collectives/test_tripwires.py`` fails on such a release and
    says so).
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

NAME = "capture-reduce-scatter"
HOOK = Hook(NAME, "UnregisteredReduceScatter")


def _invoke(method: Callable[..., Any], coordinator: Any) -> Any:
    import torch

    return method(coordinator, torch.empty((1, 8)), torch.empty((2, 8)))


def _wrap(original: Callable[..., Any], hook: Hook) -> Callable[..., Any]:
    def _maybe_aiter_reduce_scatter(self: Any, output: Any, input: Any) -> Any:
        comm = getattr(self, "ca_comm", None)
        if comm is None or not getattr(comm, "_IS_CAPTURING", False):
            return original(self, output, input)
        return original(hook.view_for(self, comm), output, input)

    return _maybe_aiter_reduce_scatter


COLLECTIVE = Collective(
    fix=NAME,
    title="reduce-scatter",
    methods=(Method("_maybe_aiter_reduce_scatter", (("self", "output", "input"),), _invoke,
                    _wrap),),
    hook=HOOK,
    how="a wrapper makes those captures pass registered=False",
)


@hookimpl
def aiter_ext_apply_fix(context: FixContext) -> FixStatus:
    return apply(COLLECTIVE, context.sglang_version, context.report)
