"""AITER custom collectives during full CUDA-graph capture: one fix per collective.

While a stream captures, aiter's *registered* collectives read the caller's tensors directly and
IPC-export their pointers when the capture ends. Graph-pool memory that cannot be exported
(torch_memory_saver under ``SGLANG_MEMORY_SAVER_CUDA_GRAPH=1``, PyTorch expandable segments)
aborts with ``invalid device pointer``; sglang 0.5.22 also reports stale peer data on replay and
offers ``SGLANG_AITER_CAPTURE_COPY_IN=1``. The rule every fix here applies: while a stream is
capturing, take the unregistered path whenever TMS is on, copy-in is requested, or the
communicator's ``enable_register_for_capturing`` is ``False`` (missing: allowed); otherwise keep
the registered fast path. Each fix probes the installed sglang and adds only what it ignores.

Fixes (each module's docstring is its ledger): :mod:`.all_reduce` (probe only),
:mod:`.all_gather`, :mod:`.reduce_scatter`, :mod:`.fused_ar_rmsnorm`. Shared parts:
:mod:`.switches`, :mod:`.aiter_model`, :mod:`.simulation`, :mod:`.probe`, :mod:`.views`,
:mod:`.hook`, :mod:`.install`, :mod:`.fix`, :mod:`.verdicts`.

This ``__init__`` imports nothing, so the fix names can be read without pluggy or sglang.
"""

from __future__ import annotations

__all__ = ["FIXES"]

#: (fix name, module), in the order they are applied and reported.
FIXES: tuple[tuple[str, str], ...] = (
    ("capture-all-reduce", "sglang_aiter_plugin.fixes.collectives.all_reduce"),
    ("capture-all-gather", "sglang_aiter_plugin.fixes.collectives.all_gather"),
    ("capture-reduce-scatter", "sglang_aiter_plugin.fixes.collectives.reduce_scatter"),
    ("capture-fused-ar-rmsnorm", "sglang_aiter_plugin.fixes.collectives.fused_ar_rmsnorm"),
)
