"""AITER custom collectives during full CUDA-graph capture: one fix per collective.

While a stream captures, aiter's *registered* collectives read the caller's tensors directly and
IPC-export their pointers when the capture ends. Graph-pool memory that cannot be exported
(torch_memory_saver under ``SGLANG_MEMORY_SAVER_CUDA_GRAPH=1``, PyTorch expandable segments)
aborts with ``invalid device pointer``; sglang 0.5.22 also reports stale peer data on replay and
offers ``SGLANG_AITER_CAPTURE_COPY_IN=1``. The rule every fix here applies: while a stream is
capturing, take the unregistered path whenever TMS is on, copy-in is requested, or the
communicator's ``enable_register_for_capturing`` is ``False`` (missing: allowed); otherwise keep
the registered fast path. Each fix probes the installed sglang (:mod:`.probe`) and adds only the
capture conditions it ignores (:mod:`.fix`).

Each fix below is a pluggy plugin object; its docstring is its ledger.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sglang_aiter_plugin.fixes.collectives.fix import (
    AllReduceCheck,
    Collective,
    Method,
    UnregisteredAllGather,
    UnregisteredFusedArRms,
    UnregisteredReduceScatter,
)

__all__ = ["ALL_GATHER", "ALL_REDUCE", "FIXES", "FUSED_AR_RMSNORM", "REDUCE_SCATTER"]

_FUSED = ("self", "input_", "residual_inp_", "weight_", "eps")
_QUANT = (*_FUSED, "group_size", "emit_bf16")
_HIDDEN = 128  # a multiple of the per-group quant's group size


def _gather_into_2x8(method: Callable[..., Any], coordinator: Any) -> Any:
    import torch

    return method(coordinator, torch.empty((2, 8)), torch.empty((1, 8)))


def _scatter_into_1x8(method: Callable[..., Any], coordinator: Any) -> Any:
    import torch

    return method(coordinator, torch.empty((1, 8)), torch.empty((2, 8)))


def _fused_1xhidden(method: Callable[..., Any], coordinator: Any) -> Any:
    import torch

    x = torch.empty((1, _HIDDEN))
    return method(coordinator, x, torch.empty((1, _HIDDEN)), torch.empty(_HIDDEN), 1e-6)


ALL_REDUCE = AllReduceCheck("capture-all-reduce", "all-reduce", """\
Fix ``capture-all-reduce``: a probe only; sglang's all-reduce already stays unregistered.

Patches:
    Nothing while the probe finds sglang right (every release 0.5.11-0.5.23). It reads
    ``sglang.srt.distributed.parallel_state:GroupCoordinator._all_reduce_out_place`` and
    ``sglang.srt.distributed.device_communicators.custom_all_reduce:dispatch_custom_allreduce``
    and ``...custom_all_reduce:CustomAllreduce.custom_all_reduce``.
Why:
    All-reduce is the collective every tensor-parallel layer runs; if it registered graph-pool
    memory under ``SGLANG_MEMORY_SAVER_CUDA_GRAPH=1`` or with aiter's
    ``enable_register_for_capturing`` off, capture would abort like its siblings'. The probe
    shows, rather than assumes, that sglang handles it: the coordinator hands the capture to
    aiter's ``custom_all_reduce`` (which follows the communicator's flag), sglang builds aiter's
    communicator with ``enable_register_for_capturing=not SGLANG_MEMORY_SAVER_CUDA_GRAPH``, and
    sglang's own HIP communicator (1-stage / deterministic all-reduce) captures with
    ``registered=not tms_cudagraph``. ``SGLANG_AITER_CAPTURE_COPY_IN`` is sglang's condition for
    all-gather and reduce-scatter staging only (its own comment in ``parallel_state``); sglang
    defines no copy-in for all-reduce, so the probe does not ask for one.
How:
    Three probes under a simulated ROCm capture, nothing installed, when sglang imports
    ``custom_all_reduce``: ``not needed`` when TMS and the communicator flag are both honoured;
    ``failed`` (with the condition named) if a release stops honouring one, since the plugin has
    no all-reduce wrapper.
Upstream PR:
    None needed.
Remove when:
    Never by itself: it is the evidence that all-reduce needs no fix
    (``tests/fixes/collectives/test_tripwires.py`` turns red if a release changes that).
""")

ALL_GATHER = Collective("capture-all-gather", "all-gather", """\
Fix ``capture-all-gather``: no IPC registration of an all-gather's input when it cannot work.

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
    The probe finds which of the three capture conditions the installed method ignores; if any,
    a wrapper hands sglang's method, during a stream capture under one of them, a communicator
    whose ``all_gather_reg`` is ``all_gather_unreg``: the input is copied into aiter's
    pre-registered buffer. Otherwise the capture keeps the registered fast path; warm-up,
    piecewise-graph and eager calls are sglang's own.
Upstream PR:
    sglang 0.5.15 added TMS and 0.5.22 copy-in (``SGLANG_AITER_CAPTURE_COPY_IN``) to this
    branch; the communicator flag has no upstream change yet.
Remove when:
    The oldest supported sglang honours all three conditions here: the probe then reports
    ``not needed`` (``tests/fixes/collectives/test_tripwires.py`` fails on such a release and
    says so).
""",
    methods=(Method("_all_gather_into_tensor", (("self", "output", "input"),)),),
    invoke=_gather_into_2x8,
    view=UnregisteredAllGather,
    how="a wrapper makes those captures call all_gather_unreg",
)

REDUCE_SCATTER = Collective("capture-reduce-scatter", "reduce-scatter", """\
Fix ``capture-reduce-scatter``: no IPC registration of a reduce-scatter's input when unsafe.

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
    The probe finds which capture conditions the installed method ignores; if any, a wrapper
    hands sglang's method, during a stream capture under one of them, a communicator whose
    ``reduce_scatter`` always passes ``registered=False`` (the input is copied into aiter's
    pre-registered buffer). Otherwise the capture keeps ``registered=True``; warm-up,
    piecewise-graph and eager calls are sglang's own.
Upstream PR:
    sgl-project/sglang#34203 (``SGLANG_MEMORY_SAVER_CUDA_GRAPH``, in 0.5.18); copy-in came with
    0.5.22. The communicator flag has no upstream change yet.
Remove when:
    The oldest supported sglang honours all three conditions here: the probe then reports
    ``not needed`` (``tests/fixes/collectives/test_tripwires.py`` fails on such a release and
    says so).
""",
    methods=(Method("_maybe_aiter_reduce_scatter", (("self", "output", "input"),)),),
    invoke=_scatter_into_1x8,
    view=UnregisteredReduceScatter,
    how="a wrapper makes those captures pass registered=False",
)

FUSED_AR_RMSNORM = Collective("capture-fused-ar-rmsnorm", "fused all-reduce+RMSNorm", """\
Fix ``capture-fused-ar-rmsnorm``: the fused all-reduce + RMSNorm registers nothing when unsafe.

Patches:
    ``sglang.srt.distributed.parallel_state:GroupCoordinator.fused_allreduce_rmsnorm`` and, from
    sglang 0.5.17, ``...:GroupCoordinator.fused_allreduce_rmsnorm_quant_per_group``
Why:
    With fusion on (``--enable-aiter-allreduce-fusion``; sglang 0.5.21+ turns it on by itself for
    GLM-DSA models on HIP), sglang calls aiter's ``custom_fused_ar_rms`` (and
    ``custom_fused_ar_rms_per_group_quant``), which during a stream capture pass
    ``registered=True`` whatever the conditions: the caller's input is IPC-exported when the
    capture ends. Memory that cannot be exported (torch_memory_saver under
    ``SGLANG_MEMORY_SAVER_CUDA_GRAPH=1``, PyTorch expandable segments, where aiter turns its
    ``enable_register_for_capturing`` off) aborts with ``invalid device pointer``, and
    ``SGLANG_AITER_CAPTURE_COPY_IN=1`` is not honoured. No release honours any of the three.
How:
    The probe finds which capture conditions the installed methods ignore; if any, a wrapper
    hands sglang's method, during a stream capture under one of them, a communicator whose
    ``custom_fused_ar_rms`` is the unregistered form sglang's own piecewise-graph branch uses,
    ``fused_ar_rms(..., registered=False)`` (and ``fused_ar_rms_per_group_quant(...,
    registered=False)``), where the communicator has it; where it does not, the call gives
    ``None``, what sglang's method returns when fusion is unavailable, and sglang runs its
    unfused all-reduce (which honours the conditions) and RMSNorm. Which of the two a process
    took is logged once, at its first such capture. Otherwise the capture keeps the registered
    fast path; warm-up, piecewise-graph and eager calls are sglang's own.
Upstream PR:
    None yet (neither in sglang nor in aiter's ``custom_fused_ar_rms``).
Remove when:
    The oldest supported sglang (or the aiter it requires) honours all three conditions here:
    the probe then reports ``not needed`` (``tests/fixes/collectives/test_tripwires.py`` fails
    on such a release and says so).
""",
    methods=(
        Method("fused_allreduce_rmsnorm", (_FUSED,)),
        Method("fused_allreduce_rmsnorm_quant_per_group", (_QUANT, (*_QUANT, "transpose_scale")),
               optional=True),
    ),
    invoke=_fused_1xhidden,
    view=UnregisteredFusedArRms,
    how="a wrapper gives those captures the communicator's unregistered form "
        "(fused_ar_rms(registered=False)) where it has one, else None so that sglang runs its "
        "unfused all-reduce and RMSNorm (logged at the first such capture)",
)

#: In the order they are applied and reported (as in ``sglang_aiter_plugin.fixes.BUILTIN_FIXES``).
FIXES = (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER, FUSED_AR_RMSNORM)
