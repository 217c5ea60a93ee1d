"""``AiterExtAttnBackend``: sglang's AITER backend with its per-batch buffers in one pool.

The constructor lets upstream allocate at the request-pool size P, then hands every per-batch
buffer it finds to a :class:`~sglang_aiter_plugin.backend.pool.BufferPool` sized for the largest
batch sglang can send on any path (:mod:`~sglang_aiter_plugin.backend.capacity`: eager batches
padded by DP attention's MLP sync, the CUDA-graph maximum) and binds the backend's and both
prefill updaters' attributes to it. ``init_cuda_graph_state`` is the shared CUDA-graph
set-up (:mod:`~sglang_aiter_plugin.backend.graph_state`: grow before upstream, verify, freeze).
Metadata and forward methods are upstream's, untouched, unless ``SGLANG_AITER_EXT_BOUNDS_CHECK=1``
asks for a batch-size check on this instance (see :mod:`~sglang_aiter_plugin.backend.bounds`).
"""

from __future__ import annotations

from typing import Any

from sglang.srt.layers.attention.aiter_backend import AiterAttnBackend

from sglang_aiter_plugin.backend.buffers import discover
from sglang_aiter_plugin.backend.capacity import batch_capacity
from sglang_aiter_plugin.backend.graph_state import PooledGraphState
from sglang_aiter_plugin.backend.pool import BufferPool

__all__ = ["PREFILL_UPDATERS", "AiterExtAttnBackend"]

#: Backend attributes holding prefill index updaters; each keeps references to pool buffers
#: under the same attribute names (0.5.11-0.5.23: ``kv_indptr``, ``qo_indptr``,
#: ``kv_last_page_len`` on the non-MLA updater; the MLA updater reads through the backend).
PREFILL_UPDATERS = ("indices_updater_prefill", "mla_indices_updater_prefill")

class AiterExtAttnBackend(PooledGraphState, AiterAttnBackend):  # type: ignore[misc]
    """sglang's AITER backend whose per-batch buffers grow, together, to the captured batch."""

    buffer_pool: BufferPool

    def __init__(
        self,
        model_runner: Any,
        skip_prefill: bool = False,
        kv_indptr_buf: Any = None,
        topk: int = 1,
    ) -> None:
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, topk)
        capacity = batch_capacity(model_runner)  # every path's largest batch, not only P
        borrowed = frozenset({"kv_indptr"}) if kv_indptr_buf is not None else frozenset()
        specs = discover(self, int(model_runner.req_to_token_pool.size), skip=borrowed)
        adopt = {s.name: getattr(self, s.name) for s in specs}
        self.buffer_pool = BufferPool(self, specs, capacity, self.device, adopt=adopt)
        bind_backend(self.buffer_pool, self)

    def _before_upstream(self, max_bs: int) -> None:
        if "kv_indptr" not in self.buffer_pool.specs and self.kv_indptr.shape[-1] < max_bs + 1:
            raise RuntimeError(
                f"kv_indptr lent to this backend holds {self.kv_indptr.shape[-1]} entries, fewer "
                f"than max_bs + 1 = {max_bs + 1}: the owner (the multi-step draft backend) must "
                "grow it before its children's init_cuda_graph_state"
            )


def bind_backend(pool: BufferPool, backend: Any) -> None:
    """Bind ``backend``'s attributes, and its prefill updaters' same-named ones, to ``pool``."""
    for name in pool.names():
        pool.bind(backend, name, name)
    for attr in PREFILL_UPDATERS:
        updater = getattr(backend, attr, None)
        if updater is None:
            continue
        for name in pool.names():
            if hasattr(updater, name) and getattr(updater, name) is not None:
                pool.bind(updater, name, name)
