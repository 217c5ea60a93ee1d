"""``AiterExtMultiStepDraftBackend``: the EAGLE draft wrapper, with its shared ``kv_indptr`` pooled.

Upstream's wrapper allocates one ``kv_indptr`` of shape ``(steps, P * topk + 1)`` and lends row
``i`` to child ``i``; its ``init_cuda_graph_state`` never grows it, so at a padded draft batch
sglang's ``generate_draft_decode_kv_indices`` writes each row's last entry into the next row's
first element. Here the wrapper's ``kv_indptr`` lives in a pool (rows of ``topk`` entries per
sequence plus one), the children are :class:`AiterExtAttnBackend`, and growth re-points the wrapper
and every child's row before the children grow their own pools.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from typing import Any

import torch
from sglang.srt.layers.attention.aiter_backend import AiterMultiStepDraftBackend

from sglang_aiter_plugin._switches import bounds_check_requested
from sglang_aiter_plugin.backend.attn import AiterExtAttnBackend
from sglang_aiter_plugin.backend.bounds import install_bounds_check
from sglang_aiter_plugin.backend.capacity import batch_capacity
from sglang_aiter_plugin.backend.pool import BufferPool, BufferSpec, Fill

__all__ = ["AiterExtMultiStepDraftBackend"]

_CHILD_CLASS_NAME = "AiterAttnBackend"


@functools.cache
def _upstream_init_building(child_cls: type) -> Callable[..., None]:
    """Upstream's ``__init__``, resolving its children's class name to ``child_cls``.

    Upstream looks ``AiterAttnBackend`` up in its module's globals when it builds the children; a
    copy of the function over a copy of those globals (with that one name changed) builds
    ``child_cls`` instead without touching the module other code reads.
    """
    init = AiterMultiStepDraftBackend.__init__
    if _CHILD_CLASS_NAME not in init.__code__.co_names:
        raise RuntimeError(
            "this sglang's AiterMultiStepDraftBackend no longer builds its children through "
            f"the name {_CHILD_CLASS_NAME!r}; sglang-aiter-plugin cannot pool its draft buffers"
        )
    namespace = dict(init.__globals__)
    namespace[_CHILD_CLASS_NAME] = child_cls
    rebuilt = types.FunctionType(
        init.__code__, namespace, init.__name__, init.__defaults__, init.__closure__
    )
    rebuilt.__kwdefaults__ = init.__kwdefaults__
    return rebuilt


class AiterExtMultiStepDraftBackend(AiterMultiStepDraftBackend):  # type: ignore[misc]
    """sglang's AITER multi-step draft backend with pooled ``kv_indptr`` and pooled children."""

    buffer_pool: BufferPool

    def __init__(self, model_runner: Any, topk: int, speculative_num_steps: int) -> None:
        _upstream_init_building(AiterExtAttnBackend)(
            self, model_runner, topk, speculative_num_steps
        )
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

    def init_cuda_graph_state(
        self, max_bs: int, max_num_tokens: int, *args: Any, **kw: Any
    ) -> None:
        check = bounds_check_requested()
        self.buffer_pool.grow(max_bs, reason=f"draft init_cuda_graph_state(max_bs={max_bs})")
        super().init_cuda_graph_state(max_bs, max_num_tokens, *args, **kw)
        stale = self.buffer_pool.stale_bindings()
        if stale:
            raise RuntimeError(f"sglang replaced the draft kv_indptr behind the pool: {stale}")
        self.buffer_pool.freeze("CUDA graphs were captured against the current buffers")
        if check:
            install_bounds_check(self, self.buffer_pool.capacity)
