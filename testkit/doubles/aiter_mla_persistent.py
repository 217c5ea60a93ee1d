"""aiter's persistent MLA decode (sglang's path for an fp8 KV cache) as torch doubles, on any
device: the work-schedule metadata and the two kernels that read it.

aiter's persistent decode runs in three steps, each HIP in aiter:

* ``get_mla_metadata_info_v1`` (Python in aiter, :func:`metadata_info`): the sizes and types of
  the six schedule buffers for a batch size. sglang allocates them once at graph set-up (at the
  largest graph) and per eager batch. The double follows aiter's sizing rule for the host
  ``aiter_mla_gpu`` stands in for (gfx942, 304 compute units, experimental kernels off).
* ``get_mla_metadata_v1`` (:func:`metadata`): writes the schedule for one batch into those
  buffers, in place: work items (request, partial slot or -1 for an unsplit request, query rows,
  KV page range, KV pages after the range), each CU's range of work items, and per query tile
  the partial slots to merge and the output rows they land in. sglang runs it before a capture
  and before every replay, outside the graph; the double reads the batch on the host and refuses
  to run while a stream captures. It splits each request's KV into chunks of whole
  ``kv_granularity`` pages, at most ``max_split_per_batch`` (and :data:`MAX_PARTIALS`) a request,
  and fewer where the buffers hold fewer work items or partial slots; a batch with more tiles
  than the buffers were sized for raises (where the HIP kernel would write past them).
* ``mla_decode_stage1_asm_fwd`` in persistent mode (:func:`stage1`) and ``mla_reduce_v1``
  (:func:`reduce`): capture-safe (while a stream captures they read the schedule on the device
  only, with static shapes, so a graph replays them against the schedule written before the
  replay; eager, stage 1 reads on the host how many work items and tokens to score). Stage 1
  writes each split work item's partial output and log-sum-exp into its partial slot, and an
  unsplit request's output directly; the reduce merges each tile's partial slots into its
  output rows.

One query token a request (decode), one KV head, page size 1.
"""

from __future__ import annotations

import math
from typing import Any

import torch

__all__ = ["COMPUTE_UNITS", "MAX_PARTIALS", "max_splits", "metadata", "metadata_info", "reduce",
           "stage1"]

COMPUTE_UNITS = 304
"""The stand-in host's compute units (an MI300X): ``work_indptr`` has one entry more."""
MAX_PARTIALS = 64
"""Most partial slots one request is split into (sglang's largest ``max_split_per_batch``)."""
MAX_TOKENS = 4096
"""The longest KV range one work item covers (the stage-1 double's static window)."""
_CHUNK = 64  # tokens stage 1 scores at once
_ROWS = 256  # work items handled at once: bounds the temporaries a graph keeps
_TILES = 8  # query tiles merged at once (each gathers MAX_PARTIALS partial slots)
_FP8 = (torch.float8_e4m3fn, torch.float8_e4m3fnuz)


def max_splits(num_head_qo: int, max_seqlen_qo: int, q_dtype: torch.dtype,
               kv_dtype: torch.dtype) -> int:
    """``get_mla_decode_fwd_max_splits``: compute units times occupancy (1 on the stand-in)."""
    return COMPUTE_UNITS


def _tiles_per_request(num_head_qo: int, seqlen_qo: int, q_dtype: torch.dtype,
                       kv_dtype: torch.dtype) -> int:
    packed = seqlen_qo * num_head_qo
    fp8 = q_dtype in _FP8 and kv_dtype in _FP8
    if num_head_qo == 16 or (fp8 and num_head_qo == 128) or (
            fp8 and num_head_qo == 64 and seqlen_qo == 1):
        return math.ceil(packed / 128)
    return math.ceil(packed / 16)


def metadata_info(batch_size: int, max_seqlen_qo: int, num_head_qo: int, q_dtype: torch.dtype,
                  kv_dtype: torch.dtype, is_sparse: bool, fast_mode: bool = True,
                  num_kv_splits: int = 32, intra_batch_mode: bool = False,
                  max_split_per_batch: int = -1) -> tuple[tuple[Any, torch.dtype], ...]:
    """``get_mla_metadata_info_v1``: ``(shape, dtype)`` of work_metadata, work_indptr,
    work_info_set, reduce_indptr, reduce_final_map, reduce_partial_map."""
    if is_sparse:
        raise NotImplementedError("aiter MLA metadata double: dense attention only")
    splits = max_splits(num_head_qo, max_seqlen_qo, q_dtype, kv_dtype)
    per_request = _tiles_per_request(num_head_qo, max_seqlen_qo, q_dtype, kv_dtype)
    tiles = batch_size * per_request
    if intra_batch_mode:
        work = partials = tiles * num_kv_splits
    elif fast_mode:
        work = (batch_size + splits - 1) * per_request
        partials = min(batch_size + splits - 1, (splits - 1) * 2) * per_request
    else:
        work = partials = tiles * splits
    if not intra_batch_mode and max_split_per_batch > 0:
        partials = max(partials, tiles + min(splits, max_split_per_batch * batch_size))
    return ((2, torch.uint64), (splits + 1, torch.int32), ((work, 8), torch.int32),
            (tiles + 1, torch.int32), ((tiles, 2), torch.int32), (partials, torch.int32))


def _splits(pages: list[int], granularity: int, cap: int, work_rows: int,
            partial_slots: int) -> list[int]:
    """Splits a request: whole granules, at most ``cap``, within the buffers' room."""
    count = [max(1, min(cap, MAX_PARTIALS, -(-p // granularity))) for p in pages]
    while sum(count) > work_rows or sum(n for n in count if n > 1) > partial_slots:
        widest = max(range(len(count)), key=count.__getitem__)
        if count[widest] == 1:
            raise ValueError(f"aiter MLA metadata double: {len(pages)} requests do not fit "
                             f"{work_rows} work items")
        count[widest] -= 1
    return count


def metadata(seqlens_qo_indptr: torch.Tensor, seqlens_kv_indptr: torch.Tensor,
             kv_last_page_lens: torch.Tensor, num_heads_per_head_k: int, num_heads_k: int,
             is_causal: bool, work_metadata_ptrs: torch.Tensor, work_info_set: torch.Tensor,
             work_indptr: torch.Tensor, reduce_indptr: torch.Tensor,
             reduce_final_map: torch.Tensor, reduce_partial_map: torch.Tensor,
             page_size: int = 1, kv_granularity: int = 16, max_seqlen_qo: int = -1,
             uni_seqlen_qo: int = -1, fast_mode: bool = True, topk: int = -1,
             max_split_per_batch: int = -1, intra_batch_mode: bool = False,
             **rest: Any) -> None:
    """``get_mla_metadata_v1``: the schedule of one batch, written into the six buffers."""
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        raise RuntimeError("aiter MLA metadata double: reads the batch on the host, so it runs "
                           "outside a capture (as sglang calls it)")
    if num_heads_k != 1 or page_size != 1 or max(max_seqlen_qo, 1) != 1 or topk > 0:
        raise NotImplementedError("aiter MLA metadata double: one KV head, page size 1, one "
                                  "query token, dense")
    qo = seqlens_qo_indptr.tolist()
    kv = seqlens_kv_indptr.tolist()
    bs = len(qo) - 1
    tiles = reduce_indptr.numel() - 1
    if bs > tiles:
        raise ValueError(f"aiter MLA metadata double: a batch of {bs} requests, buffers sized "
                         f"for {tiles} tiles (reduce_indptr {reduce_indptr.numel()} entries)")
    pages = [kv[b + 1] - kv[b] for b in range(bs)]
    granularity = max(1, kv_granularity // page_size)
    count = _splits(pages, granularity,
                    max_split_per_batch if max_split_per_batch > 0 else MAX_PARTIALS,
                    work_info_set.shape[0], reduce_partial_map.numel())
    works: list[list[int]] = []
    tile_ends: list[int] = [0]
    finals: list[list[int]] = []
    partial_slots: list[int] = []
    for b in range(bs):
        chunk = -(-pages[b] // (count[b] * granularity)) * granularity  # whole granules
        count[b] = max(1, -(-pages[b] // chunk)) if chunk else 1
        if chunk > MAX_TOKENS:
            raise ValueError(f"aiter MLA metadata double: a work item of {chunk} tokens, more "
                             f"than the stage-1 double's {MAX_TOKENS}")
        for s in range(count[b]):
            start = min(kv[b] + s * chunk, kv[b + 1])
            end = min(start + chunk, kv[b + 1])
            slot = len(partial_slots) if count[b] > 1 else -1
            if count[b] > 1:
                partial_slots.append(slot)
            works.append([b, slot, qo[b], qo[b + 1], start, end, kv[b + 1] - end, 0])
        tile_ends.append(len(partial_slots))
        finals.append([qo[b], qo[b + 1]])
    tile_ends += [len(partial_slots)] * (tiles - bs)
    finals += [[0, 0]] * (tiles - bs)
    device = work_info_set.device
    rows = torch.zeros(work_info_set.shape, dtype=torch.int32)
    rows[:, 1] = -1
    rows[: len(works)] = torch.tensor(works, dtype=torch.int32).reshape(-1, 8)
    work_info_set.copy_(rows.to(device))
    cus = work_indptr.numel() - 1
    work_indptr.copy_(torch.tensor([len(works) * i // cus for i in range(cus + 1)],
                                   dtype=torch.int32, device=device))
    reduce_indptr.copy_(torch.tensor(tile_ends, dtype=torch.int32, device=device))
    reduce_final_map.copy_(torch.tensor(finals, dtype=torch.int32, device=device))
    slots = torch.zeros(reduce_partial_map.numel(), dtype=torch.int32)
    slots[: len(partial_slots)] = torch.tensor(partial_slots, dtype=torch.int32)
    reduce_partial_map.copy_(slots.to(device))
    pointers = [work_indptr.data_ptr(), work_info_set.data_ptr()]
    work_metadata_ptrs.view(torch.int64).copy_(torch.tensor(pointers, dtype=torch.int64))


def _scale(value: Any) -> Any:
    return 1.0 if value is None else value


def _masked_put(target: torch.Tensor, index: torch.Tensor, keep: torch.Tensor,
                values: torch.Tensor) -> None:
    """``target[index[i]] = values[i]`` where ``keep[i]``, into a zeroed ``target``, with static
    shapes (each kept index is distinct)."""
    kept = keep.reshape(-1, *([1] * (values.dim() - 1)))
    target.index_put_((torch.where(keep, index, 0),),
                      torch.where(kept, values, 0).to(target.dtype), accumulate=True)


def stage1(q: torch.Tensor, kv_buffer: torch.Tensor, kv_indices: torch.Tensor,
           work_indptr: torch.Tensor, work_info_set: torch.Tensor, sm_scale: float,
           logits: torch.Tensor, attn_lse: torch.Tensor, o: torch.Tensor,
           q_scale: Any = None, kv_scale: Any = None) -> None:
    """Persistent stage 1: every scheduled work item, attention over its KV range."""
    heads, value_dim = o.shape[1], o.shape[-1]
    latent = kv_buffer.reshape(-1, kv_buffer.shape[-1])
    slots = logits.view(-1, heads, value_dim)
    lse_slots = attn_lse.view(-1, heads)
    slots.zero_()
    lse_slots.zero_()
    o.zero_()
    scheduled = work_indptr[-1]
    info = work_info_set.long()
    last = kv_indices.numel() - 1
    rows, window = info.shape[0], MAX_TOKENS  # static: what a captured graph replays
    if not (q.is_cuda and torch.cuda.is_current_stream_capturing()):  # eager: only what is used
        rows = int(scheduled)
        window = max(1, int((info[:rows, 5] - info[:rows, 4]).max())) if rows else 1
    for first in range(0, rows, _ROWS):
        work = info[first:first + _ROWS]
        kept = torch.arange(first, first + work.shape[0], device=q.device) < scheduled
        start, end = work[:, 4], work[:, 5]
        query = q[work[:, 2].clamp(0, q.shape[0] - 1)].float() * _scale(q_scale)
        best = torch.full((work.shape[0], heads), float("-inf"), device=q.device)
        total = torch.zeros_like(best)
        acc = torch.zeros(work.shape[0], heads, value_dim, device=q.device)
        for offset in range(0, window, _CHUNK):
            pos = start[:, None] + offset + torch.arange(_CHUNK, device=q.device)[None, :]
            inside = pos < end[:, None]
            keys = latent[kv_indices[pos.clamp(0, last)].long()].float() * _scale(kv_scale)
            scores = torch.einsum("whd,wtd->wht", query, keys) * float(sm_scale)
            scores = scores.masked_fill(~inside[:, None, :], float("-inf"))
            new_best = torch.maximum(best, scores.amax(-1))
            safe = new_best.nan_to_num(neginf=0.0)
            weights = torch.exp(scores - safe[..., None])
            carry = torch.exp(best - safe)
            total = total * carry + weights.sum(-1)
            acc = acc * carry[..., None] + torch.einsum("wht,wtd->whd", weights,
                                                        keys[..., :value_dim])
            best = new_best
        out = acc / total.clamp(min=1e-30)[..., None]
        lse = best + torch.log(total)
        slot = work[:, 1]
        _masked_put(slots, slot, kept & (slot >= 0), out)
        _masked_put(lse_slots, slot, kept & (slot >= 0), lse)
        _masked_put(o, work[:, 2], kept & (slot < 0), out)


def reduce(partial_output: torch.Tensor, partial_lse: torch.Tensor,
           reduce_indptr: torch.Tensor, reduce_final_map: torch.Tensor | None,
           reduce_partial_map: torch.Tensor, max_seqlen_q: int, num_kv_splits: int,
           final_output: torch.Tensor, final_lse: torch.Tensor | None = None) -> None:
    """``mla_reduce_v1``: each tile's partial slots merged into its output row (tiles with none
    are the unsplit requests stage 1 wrote)."""
    if max_seqlen_q != 1 or final_lse is not None or reduce_final_map is None:
        raise NotImplementedError("aiter MLA reduce double: one query token, no final lse, "
                                  "a final map")
    heads, value_dim = final_output.shape[1], final_output.shape[-1]
    slots = partial_output.view(-1, heads, value_dim)
    lses = partial_lse.view(-1, heads)
    last, tiles = reduce_partial_map.numel() - 1, reduce_indptr.numel() - 1
    for first in range(0, tiles, _TILES):
        start = reduce_indptr[first:min(first + _TILES, tiles)].long()
        count = reduce_indptr[first + 1:first + 1 + start.numel()].long() - start
        j = torch.arange(MAX_PARTIALS, device=start.device)
        used = j[None, :] < count[:, None]
        slot = reduce_partial_map[(start[:, None] + j[None, :]).clamp(0, last)].long()
        lse = lses[slot].masked_fill(~used[..., None], float("-inf"))  # [tiles, K, heads]
        weights = torch.softmax(lse, dim=1).nan_to_num(0.0)
        merged = torch.einsum("tkh,tkhd->thd", weights, slots[slot])
        rows = reduce_final_map[first:first + start.numel(), 0].long()
        _masked_put(final_output, rows, count > 0, merged)
