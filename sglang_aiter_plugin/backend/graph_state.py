"""CUDA-graph set-up of a pooled backend: grow the pool to the captured batch, run upstream's
set-up, right what it leaves wrong, verify every binding, freeze; the bounds check if asked for."""

from __future__ import annotations

from typing import Any

from sglang_aiter_plugin._switches import bounds_check_requested
from sglang_aiter_plugin.backend.bounds_check import install_bounds_check
from sglang_aiter_plugin.backend.pool import BufferPool

__all__ = ["FROZEN_REASON", "PooledGraphState"]

FROZEN_REASON = "CUDA graphs were captured against the current buffers"


class PooledGraphState:
    """Mixin before sglang's backend class: ``init_cuda_graph_state`` grows the pool to ``max_bs``,
    runs upstream's set-up, rights what it leaves wrong beyond the rows, verifies every binding,
    freezes the pool and installs the bounds check if asked for."""

    buffer_pool: BufferPool

    def _before_upstream(self, max_bs: int) -> None:
        """Checks that must hold before upstream's set-up runs (none by default)."""

    def _after_upstream(self, max_bs: int, max_num_tokens: int, lent: bool) -> None:
        """What upstream's set-up leaves wrong beyond the rows (nothing by default)."""

    def _extra_per_row(self) -> int:
        """Entries a graph replay writes per row beyond ``seq_len * topk`` (the bounds check)."""
        return int(getattr(self, "num_draft_tokens", None) or 0)

    def init_cuda_graph_state(
        self, max_bs: int, max_num_tokens: int, *args: Any, **kw: Any
    ) -> None:
        pool = self.buffer_pool
        owner = type(self).__name__
        check = bounds_check_requested()
        reason = f"{owner}.init_cuda_graph_state(max_bs={max_bs})"
        pool.grow(max_bs, reason=reason)
        self._before_upstream(max_bs)
        super().init_cuda_graph_state(max_bs, max_num_tokens, *args, **kw)  # type: ignore[misc]
        lent = bool(args) or kw.get("kv_indices_buf") is not None
        self._after_upstream(max_bs, max_num_tokens, lent)
        stale = pool.stale_bindings()
        if stale:
            raise RuntimeError(
                f"{owner}: sglang's init_cuda_graph_state replaced pooled buffers behind the "
                f"pool: {stale}. This sglang release is not supported by sglang-aiter-plugin; "
                "run --attention-backend aiter meanwhile."
            )
        pool.freeze(FROZEN_REASON)
        if check:
            install_bounds_check(self, pool.capacity, self._extra_per_row())
