"""One CUDA-graph set-up for every pooled backend: grow, delegate, verify, freeze, check.

sglang calls ``init_cuda_graph_state(max_bs, ...)`` once, before it captures any decode graph.
For a backend whose per-batch buffers live in a :class:`~.pool.BufferPool` that call must, in
this order:

1. read ``SGLANG_AITER_EXT_BOUNDS_CHECK`` (a bad value fails here, before anything changes);
2. grow the pool to ``max_bs`` rows, so upstream's own partial regrowth finds nothing to do;
3. run whatever must hold before upstream's set-up (:meth:`PooledGraphState._before_upstream`);
4. run upstream's ``init_cuda_graph_state``;
5. verify upstream left every bound attribute on the pool's tensors;
6. freeze the pool (graphs are captured against these addresses from now on);
7. with the switch on, shadow this instance's metadata methods with the batch-size check.

:class:`PooledGraphState` is that sequence, written once, for the backend and the draft wrapper.
"""

from __future__ import annotations

from typing import Any

from sglang_aiter_plugin._switches import bounds_check_requested
from sglang_aiter_plugin.backend.bounds import install_bounds_check
from sglang_aiter_plugin.backend.pool import BufferPool

__all__ = ["FROZEN_REASON", "PooledGraphState"]

FROZEN_REASON = "CUDA graphs were captured against the current buffers"


class PooledGraphState:
    """Mixin placed before sglang's backend class: owns ``init_cuda_graph_state``."""

    buffer_pool: BufferPool

    def _before_upstream(self, max_bs: int) -> None:
        """Checks that must hold before upstream's set-up runs (none by default)."""

    def init_cuda_graph_state(
        self, max_bs: int, max_num_tokens: int, *args: Any, **kw: Any
    ) -> None:
        pool = self.buffer_pool
        owner = type(self).__name__
        check = bounds_check_requested()
        pool.grow(max_bs, reason=f"{owner}.init_cuda_graph_state(max_bs={max_bs})")
        self._before_upstream(max_bs)
        super().init_cuda_graph_state(max_bs, max_num_tokens, *args, **kw)  # type: ignore[misc]
        stale = pool.stale_bindings()
        if stale:
            raise RuntimeError(
                f"{owner}: sglang's init_cuda_graph_state replaced pooled buffers behind the "
                f"pool: {stale}. This sglang release is not supported by sglang-aiter-plugin; "
                "run --attention-backend aiter meanwhile."
            )
        pool.freeze(FROZEN_REASON)
        if check:
            install_bounds_check(self, pool.capacity)
