"""The per-batch buffers of upstream's ``AiterAttnBackend`` that the pool owns, and their sizes
(the table in docs/buffer-pool.md)."""

from __future__ import annotations

import importlib
from typing import Any

import torch

from sglang_aiter_plugin._errors import AiterExtError
from sglang_aiter_plugin.backend.pool import BufferSpec, Fill

__all__ = ["CATALOGUE", "NOT_PER_BATCH", "PREFILL_UPDATERS", "WORKSPACE", "WORKSPACE_HELPER",
           "UnknownBatchBufferError", "discover", "workspace_bytes_per_row"]

#: Backend attributes holding prefill index updaters, which keep pool buffers under the same
#: names (``kv_indptr``, ``qo_indptr``, ``kv_last_page_len``).
PREFILL_UPDATERS = ("indices_updater_prefill", "mla_indices_updater_prefill")

#: Per-batch buffers upstream allocates at P (by release and configuration):
#: name -> (dtype as upstream allocates it, fill, entries beyond the rows).
CATALOGUE: dict[str, tuple[torch.dtype, Fill, int]] = {
    "kv_indptr": (torch.int32, Fill.ZEROS, 1),
    "qo_indptr": (torch.int32, Fill.ZEROS, 1),
    "mask_indptr": (torch.int64, Fill.ZEROS, 1),
    "qo_indptr_": (torch.int32, Fill.ZEROS, 1),
    "kv_last_page_len": (torch.int32, Fill.ONES, 0),
    "qo_indptr_unified_decode": (torch.int32, Fill.ARANGE, 1),
}
WORKSPACE = "workspace_buffer"  # ragged paged decode only; sized per row in bytes
WORKSPACE_HELPER = "sglang.srt.layers.attention.aiter_workspace"  # sglang#36563

#: Tensors whose first dimension may equal P or P + 1 without being per-batch buffers.
NOT_PER_BATCH = frozenset({"req_to_token", "q_scale", "k_scale", "v_scale"})


class UnknownBatchBufferError(AiterExtError, RuntimeError):
    """The installed backend holds a batch-sized buffer the pool does not know how to grow."""


def workspace_bytes_per_row(backend: Any) -> int:
    """Bytes of ``workspace_buffer`` per batch row: sglang's own size for one row where the
    release has it (sglang#36563: :data:`WORKSPACE_HELPER`, what its KV budget charges); else the
    larger of aiter's layout for ``paged_attention_ragged`` and upstream's formula."""
    heads = int(backend.num_head)
    try:
        helper = importlib.import_module(WORKSPACE_HELPER).aiter_attn_workspace_bytes
    except (ImportError, AttributeError):  # a release without it
        helper = None
    if helper is not None:
        try:
            return int(helper(max_num_reqs=1, num_head=heads, head_dim=int(backend.head_dim),
                              context_len=int(backend.max_context_len)))
        except TypeError as exc:
            raise UnknownBatchBufferError(
                f"sglang's {WORKSPACE_HELPER}.aiter_attn_workspace_bytes changed ({exc}): "
                "upgrade sglang-aiter-plugin, or run --attention-backend aiter meanwhile"
            ) from exc
    partitions = int(backend.max_num_partitions)
    head_size = max(int(backend.head_dim), int(getattr(backend, "v_head_dim", 0) or 0))
    q_bytes = torch.empty((), dtype=backend.input_dtype).element_size()
    aiter_layout = heads * partitions * (2 * 4 + head_size * q_bytes)
    upstream_formula = heads * partitions * int(backend.head_dim) * 4 + 2 * heads * partitions * 4
    return max(aiter_layout, upstream_formula)


def discover(
    backend: Any, capacity: int, *, skip: frozenset[str] = frozenset()
) -> list[BufferSpec]:
    """Specs of the per-batch buffers ``backend`` holds at ``capacity`` rows (``skip``: borrowed
    ones); an unknown batch-sized tensor raises :class:`UnknownBatchBufferError`."""
    specs: list[BufferSpec] = []
    unknown: list[str] = []
    for name, value in vars(backend).items():
        if not isinstance(value, torch.Tensor) or name in skip:
            continue
        if name == WORKSPACE:
            specs.append(BufferSpec(name, torch.uint8, Fill.UNINITIALISED,
                                    workspace_bytes_per_row(backend)))
        elif name in CATALOGUE:
            dtype, fill, extra = CATALOGUE[name]
            specs.append(BufferSpec(name, dtype, fill, extra=extra))
        elif name not in NOT_PER_BATCH and value.dim() >= 1 and value.shape[0] in (
            capacity, capacity + 1
        ):
            unknown.append(f"{name} {tuple(value.shape)} {value.dtype}")
    if unknown:
        raise UnknownBatchBufferError(
            f"{type(backend).__name__} holds buffers sized by the request pool ({capacity}) that "
            f"sglang-aiter-plugin does not know how to grow: {', '.join(unknown)}. A CUDA graph "
            "captured above the pool size would read past them. Upgrade sglang-aiter-plugin (or "
            "report the sglang release), or run --attention-backend aiter meanwhile."
        )
    return specs
