"""``AiterExtMultiStepDraftBackend``: the EAGLE draft wrapper, with its shared ``kv_indptr`` pooled.

Upstream's wrapper allocates one ``kv_indptr`` of shape ``(steps, P * topk + 1)`` and lends row
``i`` to child ``i``; its ``init_cuda_graph_state`` never grows it, so at a padded draft batch
sglang's ``generate_draft_decode_kv_indices`` writes each row's last entry into the next row's
first element. Here the wrapper's ``kv_indptr`` lives in a pool (rows of ``topk`` entries per
sequence plus one), the children are :class:`AiterExtAttnBackend`, and growth re-points the wrapper
and every child's row before the children grow their own pools.
"""

from __future__ import annotations

from typing import Any

import torch
from sglang.srt.layers.attention.aiter_backend import AiterMultiStepDraftBackend

from sglang_aiter_plugin._rebind import rebound
from sglang_aiter_plugin.backend.attn import AiterExtAttnBackend
from sglang_aiter_plugin.backend.capacity import batch_capacity
from sglang_aiter_plugin.backend.graph_state import PooledGraphState
from sglang_aiter_plugin.backend.pool import BufferPool, BufferSpec, Fill

__all__ = ["AiterExtMultiStepDraftBackend"]

class AiterExtMultiStepDraftBackend(PooledGraphState, AiterMultiStepDraftBackend):  # type: ignore[misc]
    """sglang's AITER multi-step draft backend with pooled ``kv_indptr`` and pooled children."""

    buffer_pool: BufferPool

    def __init__(self, model_runner: Any, topk: int, speculative_num_steps: int) -> None:
        # Upstream builds its per-step children through the module-global name AiterAttnBackend.
        init = rebound(
            AiterMultiStepDraftBackend.__init__, {"AiterAttnBackend": AiterExtAttnBackend}
        )
        init(self, model_runner, topk, speculative_num_steps)
        wrong = [
            type(c).__name__ for c in self.attn_backends if not isinstance(c, AiterExtAttnBackend)
        ]
        if wrong:
            raise RuntimeError(f"draft children were built as {wrong}, not AiterExtAttnBackend")
        capacity = batch_capacity(model_runner)  # every path's largest batch, not only P
        spec = BufferSpec(
            "kv_indptr",
            torch.int32,
            Fill.ZEROS,
            per_row=int(topk),
            extra=1,
            leading=(int(speculative_num_steps),),
        )
        self.buffer_pool = BufferPool(
            self, [spec], capacity, self.device, adopt={"kv_indptr": self.kv_indptr}
        )
        self.buffer_pool.bind(self, "kv_indptr", "kv_indptr")
        for step, child in enumerate(self.attn_backends):
            self.buffer_pool.bind(child, "kv_indptr", "kv_indptr", row=step)
