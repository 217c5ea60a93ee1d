"""aiter's real ``unified_attention`` behind sglang's backend, watched from outside the kernel.

Shared by the CPU tests (Triton interpreted) and ``gpu/buffer_pool_graphs.py``:

* :func:`fill_paged_requests` gives every request page-aligned KV locations and random KV;
* :func:`reference_rows` is plain torch attention over the request table, to check real rows;
* :class:`SentinelKernel` stands between sglang and the kernel on CPU. It copies the
  ``cu_seqlens_q`` each call was handed into a buffer one entry longer and calls the kernel with
  the handed-length view of it (the same values, the same length) twice, with two *sentinels* in
  the entry after the end: the last handed value (read as the last sequence's query end, that
  sequence is empty) and that value plus one (one query row). A kernel that never reads past the
  end gives the same output both times; one that does gives two different outputs. The
  interpreter never sees memory past a tensor this way (a short tensor of its own would let it
  write past ``out``). sglang gets the second output.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch

__all__ = ["KernelCall", "SentinelKernel", "fill_paged_requests", "make_layer", "reference_rows"]


def fill_paged_requests(runner: Any, pool: int, page: int, seed: int) -> None:
    """Page-aligned KV locations per request (as a paged allocator hands out) and random KV."""
    gen = torch.Generator().manual_seed(seed)
    table = runner.req_to_token_pool.req_to_token
    width = table.shape[1]
    pages_per_req = (width + page - 1) // page
    total_pages = runner.token_to_kv_pool.size // page - 1
    for r in range(pool):
        pages = torch.randint(1, total_pages, (pages_per_req,), generator=gen)
        locs = (pages[:, None] * page + torch.arange(page)[None, :]).reshape(-1)[:width]
        table[r] = locs.to(table.dtype).to(table.device)
    k, v = runner.token_to_kv_pool.get_kv_buffer(0)
    k.copy_(torch.randn(k.shape, generator=gen).to(k.dtype))
    v.copy_(torch.randn(v.shape, generator=gen).to(v.dtype))


def reference_rows(
    runner: Any, q: torch.Tensor, reqs: list[int], visible: list[int]
) -> torch.Tensor:
    """Row ``i`` of ``q`` ([rows, heads, dim]) attends to the first ``visible[i]`` tokens of
    request ``reqs[i]`` (fp32 torch, grouped-query heads repeated)."""
    k, v = runner.token_to_kv_pool.get_kv_buffer(0)
    table = runner.req_to_token_pool.req_to_token
    heads, hkv, dim = q.shape[1], k.shape[1], q.shape[2]
    outs = []
    for i, (r, n) in enumerate(zip(reqs, visible, strict=True)):
        locs = table[r, :n].long()
        kk = k[locs].float().repeat_interleave(heads // hkv, dim=1)
        vv = v[locs].float().repeat_interleave(heads // hkv, dim=1)
        w = torch.softmax(torch.einsum("hd,nhd->hn", q[i].float(), kk) * dim**-0.5, dim=-1)
        outs.append(torch.einsum("hn,nhd->hd", w, vv))
    return torch.stack(outs)


def make_layer(backend: Any) -> SimpleNamespace:
    """The ``RadixAttention`` fields the aiter backend reads for one full-attention layer 0."""
    return SimpleNamespace(
        tp_q_head_num=backend.num_head, tp_k_head_num=backend.num_kv_head,
        tp_v_head_num=backend.num_kv_head, qk_head_dim=backend.head_dim,
        v_head_dim=backend.head_dim, head_dim=backend.head_dim, layer_id=0, logit_cap=0.0,
        scaling=backend.head_dim**-0.5, sliding_window_size=None, k_scale=None, v_scale=None,
        is_cross_attention=False,
    )


@dataclasses.dataclass
class KernelCall:
    """One call of the kernel as sglang made it."""

    seqs: int
    """``seqused_k.numel()``: the sequences the kernel walks; it needs ``seqs + 1`` entries."""
    handed: int
    """``cu_seqlens_q.numel()``: the entries sglang's metadata gave it."""
    cu_seqlens_q: list[int]
    max_seqlen_q: int
    rows: int
    read_past_end: bool
    """The output changed with the sentinel after the end: the kernel read that entry."""
    unwritten_rows: list[int]
    """Output rows still NaN after the call (the kernel computed nothing for them)."""
    out: torch.Tensor = dataclasses.field(repr=False)

    def as_record(self) -> dict[str, Any]:
        return {
            "seqs": self.seqs, "handed": self.handed, "max_seqlen_q": self.max_seqlen_q,
            "rows": self.rows, "read_past_end": self.read_past_end,
            "unwritten_rows": self.unwritten_rows,
            "cu_seqlens_q_tail": self.cu_seqlens_q[-3:],
        }


class SentinelKernel:
    """Calls ``kernel`` with two sentinels after ``cu_seqlens_q``; records each call."""

    def __init__(self, kernel: Callable[..., Any]) -> None:
        self.kernel = kernel
        self.calls: list[KernelCall] = []

    def __call__(self, *, q: torch.Tensor, out: torch.Tensor, cu_seqlens_q: torch.Tensor,
                 seqused_k: torch.Tensor, max_seqlen_q: int, **kwargs: Any) -> Any:
        handed = cu_seqlens_q.numel()
        padded = torch.empty(handed + 1, dtype=cu_seqlens_q.dtype, device=cu_seqlens_q.device)
        padded[:handed] = cu_seqlens_q
        outputs = []
        for extra in (0, 1):
            padded[handed] = cu_seqlens_q[-1] + extra
            out.fill_(float("nan"))
            result = self.kernel(q=q, out=out, cu_seqlens_q=padded[:handed], seqused_k=seqused_k,
                                 max_seqlen_q=max_seqlen_q, **kwargs)
            outputs.append(out.detach().clone())
        nan_rows = torch.isnan(out.float()).flatten(1).any(dim=1)
        self.calls.append(KernelCall(
            seqs=seqused_k.numel(), handed=handed, cu_seqlens_q=cu_seqlens_q.tolist(),
            max_seqlen_q=int(max_seqlen_q), rows=out.shape[0],
            read_past_end=not _same_bits(*outputs),
            unwritten_rows=torch.nonzero(nan_rows).flatten().tolist(), out=outputs[-1],
        ))
        return result


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equality (NaN rows included)."""
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))
