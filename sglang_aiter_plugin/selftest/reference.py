"""The KV a self-test case attends to, and plain torch attention over it to check a kernel's rows.

* :func:`fill_paged_requests` gives every request page-aligned KV locations and random KV;
* :func:`reference_rows` attends row by row over the request table (grouped-query heads);
* :func:`reference_mla_rows` does the same for multi-head latent attention (one latent KV head);
* :func:`make_layer` holds the ``RadixAttention`` fields the aiter backend reads for layer 0.

Importing this module imports nothing else; torch comes in with the first call.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["fill_paged_requests", "make_layer", "reference_mla_rows", "reference_rows"]


def fill_paged_requests(runner: Any, pool: int, page: int, seed: int) -> None:
    """Page-aligned KV locations per request (as a paged allocator hands out) and random KV."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    table = runner.req_to_token_pool.req_to_token
    width = table.shape[1]
    pages_per_req = (width + page - 1) // page
    total_pages = runner.token_to_kv_pool.size // page - 1
    for r in range(pool):
        pages = torch.randint(1, total_pages, (pages_per_req,), generator=gen)
        locs = (pages[:, None] * page + torch.arange(page)[None, :]).reshape(-1)[:width]
        table[r] = locs.to(table.dtype).to(table.device)
    kv = runner.token_to_kv_pool
    if hasattr(kv, "get_kv_buffer") and not _is_mla(kv):
        k, v = kv.get_kv_buffer(0)
        k.copy_(torch.randn(k.shape, generator=gen).to(k.dtype))
        v.copy_(torch.randn(v.shape, generator=gen).to(v.dtype))
    else:
        latent = kv.get_key_buffer(0)
        latent.copy_(torch.randn(latent.shape, generator=gen).to(latent.dtype))


def _is_mla(kv_pool: Any) -> bool:
    return hasattr(kv_pool, "kv_lora_rank")


def reference_rows(
    runner: Any, q: torch.Tensor, reqs: list[int], visible: list[int]
) -> torch.Tensor:
    """Row ``i`` of ``q`` ([rows, heads, dim]) attends to the first ``visible[i]`` tokens of
    request ``reqs[i]`` (fp32 torch, grouped-query heads repeated)."""
    import torch

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


def reference_mla_rows(
    runner: Any, q: torch.Tensor, reqs: list[int], visible: list[int], scale: float,
    v_dim: int,
) -> torch.Tensor:
    """Multi-head latent attention in its absorbed form, as aiter's MLA decode computes it: row
    ``i`` of ``q`` ([rows, heads, kv_lora_rank + rope]) attends to the latent KV of the first
    ``visible[i]`` tokens of ``reqs[i]`` ([tokens, kv_lora_rank + rope], one head shared by
    every query head); the values are the first ``v_dim`` (kv_lora_rank) entries of each."""
    import torch

    latent = runner.token_to_kv_pool.get_key_buffer(0)
    latent = latent.reshape(latent.shape[0], -1)
    table = runner.req_to_token_pool.req_to_token
    outs = []
    for i, (r, n) in enumerate(zip(reqs, visible, strict=True)):
        kv = latent[table[r, :n].long()].float()
        w = torch.softmax(torch.einsum("hd,nd->hn", q[i].float(), kv) * scale, dim=-1)
        outs.append(torch.einsum("hn,nd->hd", w, kv[:, :v_dim]))
    return torch.stack(outs)


def make_layer(backend: Any, **fields: Any) -> SimpleNamespace:
    """The ``RadixAttention`` fields the aiter backend reads for one full-attention layer 0
    (``fields`` override them: MLA's head dims and scaling)."""
    layer = SimpleNamespace(
        tp_q_head_num=backend.num_head, tp_k_head_num=backend.num_kv_head,
        tp_v_head_num=backend.num_kv_head, qk_head_dim=backend.head_dim,
        v_head_dim=backend.head_dim, head_dim=backend.head_dim, layer_id=0, logit_cap=0.0,
        scaling=backend.head_dim**-0.5, sliding_window_size=None, k_scale=None, v_scale=None,
        is_cross_attention=False,
    )
    layer.__dict__.update(fields)
    return layer
