"""Which per-batch buffers an ``AiterAttnBackend`` holds, found on the instance, with their specs.

Upstream sizes these by the request-pool size P in the constructor; the set differs by release and
configuration (``qo_indptr_unified_decode`` from 0.5.12, ``qo_indptr_`` with MLA only,
``workspace_buffer`` only for the ragged paged decode). :func:`discover` reads what the constructed
instance actually holds and refuses an attribute that looks batch-sized but is not catalogued here,
so a release that adds one fails loudly instead of running with a short buffer.
"""

from __future__ import annotations

from typing import Any

import torch

from sglang_aiter_plugin._errors import AiterExtError
from sglang_aiter_plugin.backend.pool import BufferSpec, Fill

__all__ = [
    "NOT_PER_BATCH",
    "UnknownBatchBufferError",
    "discover",
    "workspace_bytes_per_row",
]

#: Catalogue: name -> (dtype, fill, entries beyond the rows). Dtypes as upstream allocates them.
_CATALOGUE: dict[str, tuple[torch.dtype, Fill, int]] = {
    "kv_indptr": (torch.int32, Fill.ZEROS, 1),
    "qo_indptr": (torch.int32, Fill.ZEROS, 1),
    "mask_indptr": (torch.int64, Fill.ZEROS, 1),
    "qo_indptr_": (torch.int32, Fill.ZEROS, 1),
    "kv_last_page_len": (torch.int32, Fill.ONES, 0),
    "qo_indptr_unified_decode": (torch.int32, Fill.ARANGE, 1),
}
_WORKSPACE = "workspace_buffer"

#: Tensor attributes whose first dimension may equal P or P + 1 without being per-batch buffers.
NOT_PER_BATCH: frozenset[str] = frozenset(
    {
        "req_to_token",  # the request pool's own table, (P, context), owned by sglang
        "q_scale",  # (1,) scale factors
        "k_scale",
        "v_scale",
    }
)


class UnknownBatchBufferError(AiterExtError, RuntimeError):
    """The installed backend holds a batch-sized buffer the pool does not know how to grow."""


def workspace_bytes_per_row(backend: Any) -> int:
    """Bytes of ``workspace_buffer`` per batch row: the larger of two layouts.

    * aiter's ``paged_attention_ragged`` carves the workspace per sequence into ``exp_sums`` and
      ``max_logits`` (fp32, ``heads * partitions`` each) and ``tmp_out`` in the query dtype
      (``heads * partitions * head_size``).
    * upstream's constructor sizes ``tmp_out`` as fp32 whatever the query dtype.

    Upstream's formula is the larger for every query dtype up to 4 bytes; taking the maximum keeps
    the pool at least as large as upstream (so nothing that fits there stops fitting) and still
    correct if the query dtype were wider.
    """
    heads = int(backend.num_head)
    partitions = int(backend.max_num_partitions)
    head_size = max(int(backend.head_dim), int(getattr(backend, "v_head_dim", 0) or 0))
    q_bytes = torch.empty((), dtype=backend.input_dtype).element_size()
    aiter_layout = heads * partitions * (2 * 4 + head_size * q_bytes)
    upstream_formula = heads * partitions * int(backend.head_dim) * 4 + 2 * heads * partitions * 4
    return max(aiter_layout, upstream_formula)


def _spec(backend: Any, name: str) -> BufferSpec:
    if name == _WORKSPACE:
        return BufferSpec(name, torch.uint8, Fill.UNINITIALISED, workspace_bytes_per_row(backend))
    dtype, fill, extra = _CATALOGUE[name]
    return BufferSpec(name, dtype, fill, extra=extra)


def _looks_batch_sized(tensor: torch.Tensor, capacity: int) -> bool:
    return tensor.dim() >= 1 and tensor.shape[0] in (capacity, capacity + 1)


def discover(
    backend: Any, capacity: int, *, skip: frozenset[str] = frozenset()
) -> list[BufferSpec]:
    """Specs of the per-batch buffers ``backend`` holds at ``capacity`` rows.

    ``skip`` names buffers the backend borrows from another owner. Raises
    :class:`UnknownBatchBufferError` for a tensor attribute sized like a batch buffer that is
    neither catalogued nor known not to be one.
    """
    specs: list[BufferSpec] = []
    unknown: list[str] = []
    for name, value in vars(backend).items():
        if not isinstance(value, torch.Tensor) or name in skip:
            continue
        if name in _CATALOGUE or name == _WORKSPACE:
            specs.append(_spec(backend, name))
        elif name not in NOT_PER_BATCH and _looks_batch_sized(value, capacity):
            unknown.append(f"{name} {tuple(value.shape)} {value.dtype}")
    if unknown:
        raise UnknownBatchBufferError(
            f"{type(backend).__name__} holds buffers sized by the request pool ({capacity}) that "
            f"sglang-aiter-plugin does not know how to grow: {', '.join(unknown)}. A CUDA graph "
            "captured above the pool size would read past them. Upgrade sglang-aiter-plugin (or "
            "report the sglang release), or run --attention-backend aiter meanwhile."
        )
    return specs
