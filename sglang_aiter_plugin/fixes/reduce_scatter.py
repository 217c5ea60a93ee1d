"""Fix ``reduce-scatter-tms``: no IPC registration of the caller's tensors when it cannot work.

Patches (``module:qualname``):
    * ``sglang.srt.distributed.parallel_state:GroupCoordinator._maybe_aiter_reduce_scatter``
      (0.5.15+) -- one AROUND hook, installed only where the probe finds a switch ignored.
Why:
    While a stream captures a CUDA graph, sglang's
    ``GroupCoordinator._maybe_aiter_reduce_scatter`` calls the AITER custom reduce-scatter with
    ``registered=True``: the kernel reads the caller's input directly, and when capture ends
    aiter IPC-exports that pointer to the other ranks. Memory that cannot be IPC-exported
    (the torch_memory_saver CUDA-graph pool under ``SGLANG_MEMORY_SAVER_CUDA_GRAPH=1``, PyTorch
    expandable segments) makes the process abort with ``invalid device pointer``. sglang
    0.5.15-0.5.17 always register; 0.5.18-0.5.21 honour ``SGLANG_MEMORY_SAVER_CUDA_GRAPH``;
    0.5.22+ also ``SGLANG_AITER_CAPTURE_COPY_IN``; no release honours aiter's own
    ``enable_register_for_capturing`` (aiter turns it off, e.g., with expandable segments).
How:
    A behaviour probe (:mod:`.reduce_scatter_probe`) finds which of those switches the
    installed method ignores; if any, one sglang ``AROUND`` hook
    (:mod:`.reduce_scatter_hook`) makes the capture unregistered (the input is copied into
    aiter's pre-registered buffer) exactly when one of them is on. Otherwise the capture keeps
    ``registered=True``; warm-up, piecewise-graph and eager calls are sglang's own.
    ``sglang.srt.distributed.parallel_state`` is imported at registration: the probe needs it,
    sglang's ``apply_hooks`` imports it anyway to resolve the hook target, it costs about 20 ms
    once ``sglang.srt.plugins`` (which ``load_plugins`` lives in) is imported, and the launcher
    imports it anyway; deferring it would leave the log line and ``doctor`` without a verdict.
Upstream PR:
    sgl-project/sglang#34203 (``SGLANG_MEMORY_SAVER_CUDA_GRAPH``, in 0.5.18). The communicator
    flag has no upstream change yet.
Remove when:
    The oldest supported sglang honours all three switches; the probe then reports
    ``not needed`` on every supported release.
"""

from __future__ import annotations

from sglang_aiter_plugin._status import FixState, FixStatus
from sglang_aiter_plugin.fixes.reduce_scatter_hook import install, plan_for
from sglang_aiter_plugin.fixes.reduce_scatter_probe import (
    METHOD,
    PARAMETERS,
    ProbeError,
    probe,
    signature_of,
)
from sglang_aiter_plugin.plugin import hookimpl
from sglang_aiter_plugin.plugin.spec import FixContext

__all__ = ["NAME", "aiter_ext_apply_fix"]

NAME = "reduce-scatter-tms"
MODULE = "sglang.srt.distributed.parallel_state"


@hookimpl
def aiter_ext_apply_fix(context: FixContext) -> FixStatus:
    if context.sglang_version is None:
        return FixStatus(NAME, FixState.SKIPPED, "sglang is not installed")
    try:
        from sglang.srt.distributed import parallel_state
    except Exception as exc:
        return FixStatus(NAME, FixState.FAILED,
                         f"cannot import {MODULE} ({type(exc).__name__}: {exc}); sglang unchanged")
    coordinator = parallel_state.GroupCoordinator
    where = f"sglang {context.sglang_version}"
    if METHOD not in vars(coordinator):
        return FixStatus(NAME, FixState.SKIPPED,
                         f"{where} has no GroupCoordinator.{METHOD}: no AITER reduce-scatter "
                         "path to fix")
    params = signature_of(coordinator)
    if params != PARAMETERS:
        return FixStatus(NAME, FixState.SKIPPED,
                         f"{where} changed GroupCoordinator.{METHOD} to ({', '.join(params)}); "
                         f"the fix knows ({', '.join(PARAMETERS)}), so it leaves sglang unchanged")
    try:
        result = probe(coordinator)
    except ProbeError as exc:
        return FixStatus(NAME, FixState.FAILED,
                         f"{exc}; sglang unchanged, please report this sglang release")
    honoured = ", ".join(map(str, result.honoured)) or "none"
    if not result.ignored:
        return FixStatus(NAME, FixState.NOT_NEEDED,
                         f"{where} already captures unregistered under: {honoured}")
    plan = plan_for(result.ignored, parallel_state.envs)
    install(plan)
    ignored = ", ".join(map(str, result.ignored))
    return FixStatus(NAME, FixState.APPLIED,
                     f"{where} registers during capture despite {ignored}; an AROUND hook "
                     f"makes those captures unregistered; sglang itself honours: {honoured}")
