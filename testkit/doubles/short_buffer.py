"""A test-only fault in ``aiter-ext`` (a double of a regression in its own buffers): the buffer
named by :data:`SHORT_BUFFER_VAR` is cut one batch row short of the capacity its pool sized it for,
right after the pool is built, so that the largest batch sglang sends would read or write past it.

One row is one entry of a per-batch buffer (``kv_indptr``, ``kv_last_page_len``, ...) and, for
``workspace_buffer``, what aiter's ``paged_attention_ragged`` writes per batch row: ``exp_sums``
and ``max_logits`` (fp32) and ``tmp_out`` (query dtype, head size wide), per head and partition.
The cut holds until the pool re-points its buffers (a growth at graph set-up); the eager batches
keep it. :func:`install` runs in every process through the test-only sglang plugin
(:mod:`testkit.doubles.server_plugin`, ``short-buffer``).
"""

from __future__ import annotations

import functools
import os
from typing import Any

__all__ = ["SHORT_BUFFER_VAR", "install"]

SHORT_BUFFER_VAR = "SGLANG_E2E_SHORT_BUFFER"
"""The name of the ``aiter-ext`` buffer to cut (for example ``workspace_buffer``)."""


def _bytes_per_row(backend: Any) -> int:
    import torch

    heads, parts = int(backend.num_head), int(backend.max_num_partitions)
    head = max(int(backend.head_dim), int(getattr(backend, "v_head_dim", 0) or 0))
    q_bytes = torch.empty((), dtype=backend.input_dtype).element_size()
    return heads * parts * (2 * 4 + head * q_bytes)


def install() -> None:
    """Cut the named buffer of every ``aiter-ext`` backend built in this process from now on."""
    name = os.environ.get(SHORT_BUFFER_VAR, "").strip()
    if not name:
        raise RuntimeError(f"short-buffer: {SHORT_BUFFER_VAR} names no buffer")
    from sglang_aiter_plugin.backend.pool import BufferPool

    built = BufferPool.__init__

    @functools.wraps(built)
    def cut(self: BufferPool, owner: Any, *args: Any, **kwargs: Any) -> None:
        built(self, owner, *args, **kwargs)
        if name not in self.names():
            return
        tensor = getattr(owner, name)
        keep = ((self.capacity - 1) * _bytes_per_row(owner) if name == "workspace_buffer"
                else tensor.shape[-1] - 1)
        setattr(owner, name, tensor[..., :keep])

    BufferPool.__init__ = cut  # type: ignore[method-assign]
