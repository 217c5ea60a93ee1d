"""Reference kernels with aiter's per-row memory contract, for GPUs where aiter cannot run.

Each function has the signature sglang calls and reads and writes, per batch row, exactly what
aiter's kernel does (ROCm/aiter: ``csrc/cpp_itfs/pa/pa_ragged*``, ``mha_batch_prefill_kernels.cu``,
``unified_attention``); the arithmetic is plain online-softmax attention, not aiter's:

* ``paged_attention_ragged``: ``num_seqs = query.size(0)``; row ``s`` reads ``kv_indptr[s]`` and
  ``kv_indptr[s + 1]``, ``kv_last_page_lens[s]`` only when ``block_size > 1``, its pages from
  ``kv_page_indices``; it writes ``exp_sums`` (fp32), then ``max_logits`` (fp32), then ``tmp_out``
  (query dtype) into ``workspace_buffer``, each laid out ``[num_seqs, heads, partitions]``, through
  a raw pointer, so a short workspace is written past its end as aiter would.
* ``mha_batch_prefill_func``: ``batch = cu_seqlens_q.numel() - 1``; ``kv_indptr`` must hold
  ``batch + 1`` entries (aiter's shape check); ``kv_last_page_lens`` is required for pages > 1.
* ``unified_attention``: ``num_seqs = seqused_k.numel()``; row ``s`` reads ``cu_seqlens_q[s]`` and
  ``cu_seqlens_q[s + 1]`` and row ``s`` of ``block_table``.

``CALLS`` records the indptrs each prefill call received (eager calls only).
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

__all__ = ["CALLS", "mha_batch_prefill_func", "paged_attention_ragged", "unified_attention"]

CALLS: list[dict[str, Any]] = []
TILE = 32


@triton.jit
def _pa_partition(
    query, key_cache, value_cache, kv_indptr, kv_page_indices, kv_last_page_lens, workspace,
    num_seqs, scale, s_qs, s_qh, s_kb, s_kp, s_kh, s_vb, s_vp, s_vh, wrong_slot,
    H: tl.constexpr, GROUP: tl.constexpr, D: tl.constexpr, BLOCK_SIZE: tl.constexpr,
    PARTITION: tl.constexpr, NP: tl.constexpr, TILE: tl.constexpr, CONTROL: tl.constexpr,
):
    s = tl.program_id(0)
    p = tl.program_id(1)
    h = tl.program_id(2)
    start = tl.load(kv_indptr + s)
    end = tl.load(kv_indptr + s + 1)
    if BLOCK_SIZE > 1:
        ctx = (end - start - 1) * BLOCK_SIZE + tl.load(kv_last_page_lens + s)
    else:
        ctx = end - start
    lo = p * PARTITION
    if lo < ctx:
        hi = tl.minimum(lo + PARTITION, ctx)
        d = tl.arange(0, D)
        q = tl.load(query + s * s_qs + h * s_qh + d).to(tl.float32)
        m = tl.max(tl.full([TILE], float("-inf"), tl.float32), 0)
        den = tl.sum(tl.zeros([TILE], tl.float32), 0)
        acc = tl.zeros([D], tl.float32)
        for t0 in range(lo, hi, TILE):
            t = t0 + tl.arange(0, TILE)
            ok = t < hi
            entry = t // BLOCK_SIZE
            if CONTROL:  # the control: entry 0 read from entry 1 while the flag is set
                shift = tl.load(wrong_slot)
                entry = tl.where((entry == 0) & (shift != 0) & (end - start > 1), 1, entry)
            page = tl.load(kv_page_indices + start + entry, mask=ok, other=0)
            k_off = page * s_kb + (t % BLOCK_SIZE) * s_kp + (h // GROUP) * s_kh
            v_off = page * s_vb + (t % BLOCK_SIZE) * s_vp + (h // GROUP) * s_vh
            k = tl.load(key_cache + k_off[:, None] + d[None, :], mask=ok[:, None], other=0.0)
            logit = tl.sum(k.to(tl.float32) * q[None, :], 1) * scale
            logit = tl.where(ok, logit, float("-inf"))
            m_new = tl.maximum(m, tl.max(logit, 0))
            alpha = tl.exp(m - m_new)
            w = tl.exp(logit - m_new)
            v = tl.load(value_cache + v_off[:, None] + d[None, :], mask=ok[:, None], other=0.0)
            acc = acc * alpha + tl.sum(w[:, None] * v.to(tl.float32), 0)
            den = den * alpha + tl.sum(w, 0)
            m = m_new
        idx = (s * H + h) * NP + p
        exp_sums = workspace.to(tl.pointer_type(tl.float32))
        max_logits = (workspace + num_seqs * H * NP * 4).to(tl.pointer_type(tl.float32))
        tmp_out = (workspace + 2 * num_seqs * H * NP * 4).to(
            tl.pointer_type(query.dtype.element_ty)
        )
        tl.store(exp_sums + idx, den)
        tl.store(max_logits + idx, m)
        tl.store(tmp_out + idx * D + d, (acc / den).to(query.dtype.element_ty))


@triton.jit
def _pa_reduce(
    out, kv_indptr, kv_last_page_lens, workspace, num_seqs, s_os, s_oh,
    H: tl.constexpr, D: tl.constexpr, BLOCK_SIZE: tl.constexpr, PARTITION: tl.constexpr,
    NP: tl.constexpr, NP_POW2: tl.constexpr, DT: tl.constexpr,
):
    s = tl.program_id(0)
    h = tl.program_id(1)
    start = tl.load(kv_indptr + s)
    end = tl.load(kv_indptr + s + 1)
    if BLOCK_SIZE > 1:
        ctx = (end - start - 1) * BLOCK_SIZE + tl.load(kv_last_page_lens + s)
    else:
        ctx = end - start
    n_parts = (ctx + PARTITION - 1) // PARTITION
    parts = tl.arange(0, NP_POW2)
    ok = parts < n_parts
    base = (s * H + h) * NP
    exp_sums = workspace.to(tl.pointer_type(tl.float32))
    max_logits = (workspace + num_seqs * H * NP * 4).to(tl.pointer_type(tl.float32))
    tmp_out = (workspace + 2 * num_seqs * H * NP * 4).to(tl.pointer_type(DT))
    ml = tl.load(max_logits + base + parts, mask=ok, other=float("-inf"))
    es = tl.load(exp_sums + base + parts, mask=ok, other=0.0)
    w = es * tl.exp(ml - tl.max(ml, 0))
    w = tl.where(ok, w, 0.0)
    d = tl.arange(0, D)
    part_out = tl.load(
        tmp_out + (base + parts)[:, None] * D + d[None, :], mask=ok[:, None], other=0.0
    )
    o = tl.sum(w[:, None] * part_out.to(tl.float32), 0) / tl.sum(w, 0)
    tl.store(out + s * s_os + h * s_oh + d, o.to(out.dtype.element_ty))


_TL = {torch.bfloat16: tl.bfloat16, torch.float16: tl.float16, torch.float32: tl.float32}


def paged_attention_ragged(
    out: torch.Tensor, workspace_buffer: torch.Tensor, query: torch.Tensor,
    key_cache: torch.Tensor, value_cache: torch.Tensor, scale: float, kv_indptr: torch.Tensor,
    kv_page_indices: torch.Tensor, kv_last_page_lens: torch.Tensor | None, block_size: int,
    max_num_partitions: int, alibi_slopes: Any = None, kv_cache_dtype: str = "auto",
    kv_cache_layout: str = "NHD", logits_soft_cap: float = 0.0, k_scale: Any = None,
    v_scale: Any = None, fp8_out_scale: Any = None, partition_size: int = 256, mtp: int = 1,
    *, wrong_slot: torch.Tensor | None = None,
) -> None:
    """``wrong_slot`` (a test control, not aiter's): a device int32 scalar; while it is not 0,
    each sequence's first KV entry is read from its second (read on the device, so a captured
    graph follows it at replay)."""
    num_seqs, heads, dim = query.shape
    group = heads // key_cache.shape[2]
    last = kv_last_page_lens if block_size > 1 else kv_indptr  # aiter passes null for block 1
    _pa_partition[(num_seqs, max_num_partitions, heads)](
        query, key_cache, value_cache, kv_indptr, kv_page_indices, last, workspace_buffer,
        num_seqs, float(scale), query.stride(0), query.stride(1),
        key_cache.stride(0), key_cache.stride(1), key_cache.stride(2),
        value_cache.stride(0), value_cache.stride(1), value_cache.stride(2),
        wrong_slot if wrong_slot is not None else kv_indptr,
        H=heads, GROUP=group, D=dim, BLOCK_SIZE=block_size, PARTITION=partition_size,
        NP=max_num_partitions, TILE=TILE, CONTROL=wrong_slot is not None,
    )
    _pa_reduce[(num_seqs, heads)](
        out, kv_indptr, last, workspace_buffer, num_seqs, out.stride(0), out.stride(1),
        H=heads, D=dim, BLOCK_SIZE=block_size, PARTITION=partition_size,
        NP=max_num_partitions, NP_POW2=triton.next_power_of_2(max_num_partitions),
        DT=_TL[query.dtype],
    )


@triton.jit
def _varlen_attention(
    q, k_cache, v_cache, out, cu_q, kv_start_of, kv_len_of, pages, page_row_stride, scale,
    s_qt, s_qh, s_kb, s_kp, s_kh, s_vb, s_vp, s_vh, s_ot, s_oh,
    GROUP: tl.constexpr, D: tl.constexpr, PAGE: tl.constexpr, TILE: tl.constexpr,
    KV_FROM_INDPTR: tl.constexpr,
):
    """Causal attention of rows ``cu_q[b]:cu_q[b+1]`` over ``b``'s KV tokens (one program/head)."""
    b = tl.program_id(0)
    h = tl.program_id(1)
    q_lo = tl.load(cu_q + b)
    q_hi = tl.load(cu_q + b + 1)
    if KV_FROM_INDPTR:
        kv_lo = tl.load(kv_start_of + b)
        kv_len = tl.load(kv_start_of + b + 1) - kv_lo
        row = pages + kv_lo
    else:
        kv_len = tl.load(kv_len_of + b)
        row = pages + b * page_row_stride
    d = tl.arange(0, D)
    for i in range(q_lo, q_hi):
        visible = kv_len - (q_hi - 1 - i)
        qv = tl.load(q + i * s_qt + h * s_qh + d).to(tl.float32)
        m = tl.max(tl.full([TILE], float("-inf"), tl.float32), 0)
        den = tl.sum(tl.zeros([TILE], tl.float32), 0)
        acc = tl.zeros([D], tl.float32)
        for t0 in range(0, visible, TILE):
            t = t0 + tl.arange(0, TILE)
            ok = t < visible
            page = tl.load(row + t // PAGE, mask=ok, other=0)
            k_off = page * s_kb + (t % PAGE) * s_kp + (h // GROUP) * s_kh
            v_off = page * s_vb + (t % PAGE) * s_vp + (h // GROUP) * s_vh
            kk = tl.load(k_cache + k_off[:, None] + d[None, :], mask=ok[:, None], other=0.0)
            logit = tl.where(ok, tl.sum(kk.to(tl.float32) * qv[None, :], 1) * scale, float("-inf"))
            m_new = tl.maximum(m, tl.max(logit, 0))
            alpha = tl.exp(m - m_new)
            w = tl.exp(logit - m_new)
            vv = tl.load(v_cache + v_off[:, None] + d[None, :], mask=ok[:, None], other=0.0)
            acc = acc * alpha + tl.sum(w[:, None] * vv.to(tl.float32), 0)
            den = den * alpha + tl.sum(w, 0)
            m = m_new
        tl.store(out + i * s_ot + h * s_oh + d, (acc / den).to(out.dtype.element_ty))


def _as_paged(cache: torch.Tensor) -> torch.Tensor:
    return cache if cache.dim() == 4 else cache.unsqueeze(1)  # [tokens, H, D] -> page size 1


def mha_batch_prefill_func(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
    kv_indptr: torch.Tensor, kv_page_indices: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
    dropout_p: float = 0.0, softmax_scale: float | None = None, logits_soft_cap: float = 0.0,
    causal: bool = False, window_size: Any = (-1, -1), alibi_slopes: Any = None,
    deterministic: bool = False, return_lse: bool = False, return_attn_probs: bool = False,
    out: torch.Tensor | None = None, kv_last_page_lens: torch.Tensor | None = None,
    **_: Any,
) -> torch.Tensor:
    batch = cu_seqlens_q.numel() - 1
    if kv_indptr.numel() != batch + 1:
        raise RuntimeError(f"kv_indptr must have shape [{batch + 1}], got {tuple(kv_indptr.shape)}")
    kc, vc = _as_paged(k), _as_paged(v)
    if kc.shape[1] > 1 and kv_last_page_lens is None:
        raise RuntimeError("if page_block_size > 1, must pass kv_last_page_lens to kernel")
    if not (q.is_cuda and torch.cuda.is_current_stream_capturing()):
        CALLS.append({"cu_seqlens_q": cu_seqlens_q.tolist(), "kv_indptr": kv_indptr.tolist()})
    o = out if out is not None else torch.empty_like(q)
    heads, dim = q.shape[1], q.shape[2]
    scale = softmax_scale if softmax_scale is not None else dim**-0.5
    _varlen_attention[(batch, heads)](
        q, kc, vc, o, cu_seqlens_q, kv_indptr, kv_indptr, kv_page_indices, 0, float(scale),
        q.stride(0), q.stride(1), kc.stride(0), kc.stride(1), kc.stride(2),
        vc.stride(0), vc.stride(1), vc.stride(2), o.stride(0), o.stride(1),
        GROUP=heads // kc.shape[2], D=dim, PAGE=kc.shape[1], TILE=TILE, KV_FROM_INDPTR=True,
    )
    return o


def unified_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor,
    cu_seqlens_q: torch.Tensor, max_seqlen_q: int, seqused_k: torch.Tensor, max_seqlen_k: int,
    softmax_scale: float, causal: bool, window_size: Any, block_table: torch.Tensor,
    softcap: float = 0.0, **_: Any,
) -> None:
    num_seqs = seqused_k.numel()
    heads, dim = q.shape[1], q.shape[2]
    _varlen_attention[(num_seqs, heads)](
        q, k, v, out, cu_seqlens_q, seqused_k, seqused_k, block_table, block_table.stride(0),
        float(softmax_scale), q.stride(0), q.stride(1), k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2), out.stride(0), out.stride(1),
        GROUP=heads // k.shape[2], D=dim, PAGE=k.shape[1], TILE=TILE, KV_FROM_INDPTR=False,
    )
