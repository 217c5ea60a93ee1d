"""Fix ``capture-all-gather``: no IPC registration of an all-gather's input when it cannot work.

Patches:
    ``sglang.srt.distributed.parallel_state:GroupCoordinator._all_gather_into_tensor``
Why:
    While a stream captures a CUDA graph, sglang's AITER all-gather (0.5.13+, on by default with
    ``SGLANG_USE_AITER_AG``) calls aiter's ``all_gather_reg``: the kernel reads the caller's
    input directly, and when the capture ends aiter IPC-exports that pointer to the other ranks.
    Memory that cannot be exported (torch_memory_saver's graph pool under
    ``SGLANG_MEMORY_SAVER_CUDA_GRAPH=1``, PyTorch expandable segments) aborts the process with
    ``invalid device pointer``; and sglang 0.5.22 documents stale peer data on replay under DP
    attention + TP MoE, its reason for ``SGLANG_AITER_CAPTURE_COPY_IN=1``. sglang 0.5.13-0.5.14
    always register; 0.5.15-0.5.21 honour TMS; 0.5.22+ also copy-in; no release reads aiter's
    ``enable_register_for_capturing`` here (sglang calls ``all_gather_reg`` itself, bypassing
    aiter's ``custom_all_gather``, which would honour it).
How:
    The probe (:mod:`.probe`) finds which of the three switches the installed method ignores;
    if any, a wrapper (:mod:`.install`) hands sglang's method, during a stream capture with one
    of them on, a communicator whose ``all_gather_reg`` is ``all_gather_unreg`` (:mod:`.views`):
    the input is copied into aiter's pre-registered buffer. Otherwise the capture keeps the
    registered fast path; warm-up, piecewise-graph and eager calls are sglang's own.
Upstream PR:
    sglang 0.5.15 added TMS and 0.5.22 copy-in (``SGLANG_AITER_CAPTURE_COPY_IN``) to this
    branch; the communicator flag has no upstream change yet.
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

NAME = "capture-all-gather"
HOOK = Hook(NAME, "UnregisteredAllGather")


def _invoke(method: Callable[..., Any], coordinator: Any) -> Any:
    import torch

    return method(coordinator, torch.empty((2, 8)), torch.empty((1, 8)))


def _wrap(original: Callable[..., Any], hook: Hook) -> Callable[..., Any]:
    def _all_gather_into_tensor(self: Any, output: Any, input: Any) -> Any:
        comm = getattr(self, "ca_comm", None)
        if comm is None or not getattr(comm, "_IS_CAPTURING", False):
            return original(self, output, input)
        return original(hook.view_for(self, comm), output, input)

    return _all_gather_into_tensor


COLLECTIVE = Collective(
    fix=NAME,
    title="all-gather",
    methods=(Method("_all_gather_into_tensor", (("self", "output", "input"),), _invoke, _wrap),),
    hook=HOOK,
    how="a wrapper makes those captures call all_gather_unreg",
)


@hookimpl
def aiter_ext_apply_fix(context: FixContext) -> FixStatus:
    return apply(COLLECTIVE, context.sglang_version, context.report)
