"""``SGLANG_AITER_EXT_BOUNDS_CHECK=1``: refuse a CUDA-graph metadata call larger than the buffers
its graphs were captured with, before anything is written."""

from __future__ import annotations

import functools
from typing import Any

from sglang_aiter_plugin._errors import AiterExtError
from sglang_aiter_plugin.backend.graph_metadata import wrap_metadata_methods

__all__ = ["PATCH", "BatchTooLargeError", "install_bounds_check"]

PATCH = "bounds-check"


class BatchTooLargeError(AiterExtError, ValueError):
    """A CUDA-graph metadata call asked for more than the buffers captured for it hold."""


def install_bounds_check(backend: Any, capacity: int, extra_per_row: int = 0) -> None:
    """Before upstream's graph metadata runs, raise :class:`BatchTooLargeError` for more rows than
    ``capacity`` or more entries (``seq_lens_sum`` x ``topk`` + ``extra_per_row`` a row) than a
    row of ``cuda_graph_kv_indices`` holds; idempotent."""
    wrap_metadata_methods(backend, PATCH, "SGLANG_AITER_EXT_BOUNDS_CHECK=1 cannot check it. "
                          "Unset the variable (or report the sglang release to "
                          "sglang-aiter-plugin).",
                          before=functools.partial(_check, backend, capacity, extra_per_row))


def _check(backend: Any, capacity: int, extra: int, name: str, batch: Any) -> None:
    where = f"{type(backend).__name__}.{name}"
    bs = int(batch.batch_size)
    if bs > capacity:
        raise BatchTooLargeError(
            f"{where}: a batch of {bs} rows, but CUDA graphs were captured for at most "
            f"{capacity} (the per-batch buffers hold {capacity} rows); nothing was written. "
            "sglang's graph runner runs larger batches eagerly; whatever called this must do "
            f"the same, or capture graphs up to {bs} (--cuda-graph-max-bs)."
        )
    indices = getattr(backend, "cuda_graph_kv_indices", None)
    if indices is None or batch.seq_lens is None:
        return
    total = batch.seq_lens_sum
    if total is None:
        total = int(batch.seq_lens[:bs].sum())
    topk = int(getattr(backend, "topk", 1) or 1)
    need, room = int(total) * topk + bs * extra, int(indices.shape[-1])
    if need > room:
        per_step = " per draft step" if indices.dim() > 1 else ""  # the draft wrapper's rows
        raise BatchTooLargeError(
            f"{where}: a batch whose seq_lens_sum is {total} (x topk {topk}, + {extra} per row) "
            f"needs {need} entries of cuda_graph_kv_indices, which holds {room}{per_step}; "
            "nothing was written. A longer batch than the graphs were set up for reached the "
            "graph metadata: run it eagerly, or report the caller to sglang-aiter-plugin."
        )
