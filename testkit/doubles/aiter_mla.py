"""Double of aiter's ``aiter/mla.py`` memory contract on CPU, for the split-table tests
(aiter#4587): the cached split table, the two stages, and a captured graph that reads the table
without owning it.

What it keeps of aiter (ROCm/aiter e4048607, ``aiter/mla.py``):

* :func:`get_meta_param` is a ``functools.lru_cache`` of 128 entries keyed as aiter keys it,
  ``(num_kv_splits, bs, total_kv, nhead, max_seqlen_q, dtype)``, returning ``(num_kv_splits,
  num_kv_splits_indptr)``; the indptr is a new tensor the cache owns, freed (garbage-collected
  here) when the cache evicts it and nothing else holds it;
* :func:`mla_decode_fwd` in non-persistent mode (no ``work_meta_data``) calls that lookup by its
  module-global name wherever it is handed no ``num_kv_splits`` or no indptr, writes per-split
  partial outputs and log-sum-exps (stage 1: torch here, HIP assembly in aiter), then combines
  them reading ``num_kv_splits_indptr[b]``, ``[b + 1]`` (stage 2, aiter's Triton reduce);
* in persistent mode it looks nothing up.

What stands in for CUDA (no GPU here): :func:`capture` is a graph capture. Inside it, torch says
the current stream is capturing, and each call records a replay step; :meth:`Graph.replay` runs
the recorded steps again on the same tensors, as a graph replays the same addresses. The graph
holds every tensor it was handed, except the split table, which it reads through a weak reference
(a graph owns none of the memory it reads). Once that table is freed, the replay reads reused
memory: zeros here, which give every split-combined row NaN (no split to combine).
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import torch

__all__ = ["CACHE_ENTRIES", "Graph", "capture", "get_meta_param", "mla_decode_fwd"]

CACHE_ENTRIES = 128
"""``functools.lru_cache``'s default size, which aiter's ``get_meta_param`` uses."""
SPLITS = 4
"""The split count the lookup picks when asked to (aiter's depends on the compute units)."""

_recording: list[Graph] = []


class Graph:
    """What a capture recorded: :meth:`replay` runs its steps again."""

    def __init__(self) -> None:
        self.steps: list[Callable[[], None]] = []

    def replay(self) -> None:
        for step in self.steps:
            step()


@contextlib.contextmanager
def capture() -> Iterator[Graph]:
    """A graph capture on CPU: the calls of :func:`mla_decode_fwd` inside it are recorded in the
    graph it yields, and torch says meanwhile that CUDA is initialised and the current stream is
    capturing."""
    graph = Graph()
    real = torch.cuda.is_initialized, torch.cuda.is_current_stream_capturing
    _recording.append(graph)
    torch.cuda.is_initialized = torch.cuda.is_current_stream_capturing = lambda: True
    try:
        yield graph
    finally:
        torch.cuda.is_initialized, torch.cuda.is_current_stream_capturing = real
        _recording.pop()


@functools.lru_cache(maxsize=CACHE_ENTRIES)
def get_meta_param(num_kv_splits: int | None, bs: int, total_kv: int, nhead: int,
                   max_seqlen_q: int, dtype: torch.dtype) -> tuple[int, torch.Tensor]:
    splits = SPLITS if num_kv_splits is None else int(num_kv_splits)
    return splits, torch.arange(0, (bs + 1) * splits, splits, dtype=torch.int32)


def mla_decode_fwd(
    q: torch.Tensor, kv_buffer: torch.Tensor, o: torch.Tensor, qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor, kv_indices: torch.Tensor, kv_last_page_lens: torch.Tensor | None,
    max_seqlen_q: int, page_size: int = 1, nhead_kv: int = 1, sm_scale: float | None = None,
    logit_cap: float = 0.0, num_kv_splits: int | None = None,
    num_kv_splits_indptr: torch.Tensor | None = None, work_meta_data: Any = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Decode (one query row per request, page size 1) over the latent KV: query row ``b``
    attends to ``kv_indices[kv_indptr[b]:kv_indptr[b + 1]]``; the values are the first
    ``o.shape[-1]`` entries of each latent."""
    bs = qo_indptr.shape[0] - 1
    if work_meta_data is None and (num_kv_splits is None or num_kv_splits_indptr is None):
        num_kv_splits, num_kv_splits_indptr = get_meta_param(
            num_kv_splits, bs, kv_indices.shape[0], o.shape[1], max_seqlen_q, q.dtype)
    if num_kv_splits_indptr is None:  # persistent: sglang's work metadata, one split a row
        num_kv_splits_indptr = torch.arange(bs + 1, dtype=torch.int32)
    scale = float(sm_scale) if sm_scale is not None else q.shape[-1] ** -0.5
    table: Callable[[], torch.Tensor | None] = weakref.ref(num_kv_splits_indptr)

    def run() -> None:
        split_table = table()
        if split_table is None:  # freed: the memory now holds what its next owner wrote
            split_table = torch.zeros(bs + 1, dtype=torch.int32)
        _decode(q, kv_buffer, o, qo_indptr, kv_indptr, kv_indices, split_table, scale)

    if _recording:
        _recording[-1].steps.append(run)
    run()
    return o, None


def _decode(q: torch.Tensor, kv_buffer: torch.Tensor, o: torch.Tensor, qo_indptr: torch.Tensor,
            kv_indptr: torch.Tensor, kv_indices: torch.Tensor, split_table: torch.Tensor,
            scale: float) -> None:
    latent = kv_buffer.reshape(-1, kv_buffer.shape[-1]).float()
    value_dim = o.shape[-1]
    bs = qo_indptr.shape[0] - 1
    qo, kv, splits = qo_indptr.tolist(), kv_indptr[: bs + 1].tolist(), split_table.tolist()
    for b in range(bs):
        keys = latent[kv_indices[kv[b]:kv[b + 1]].long()]
        rows = q[qo[b]:qo[b + 1]].float()  # [rows, heads, dim]
        count = splits[b + 1] - splits[b]
        bounds = torch.linspace(0, keys.shape[0], count + 1).long().tolist() if count > 0 else []
        parts, lses = [], []
        for start, end in itertools.pairwise(bounds):  # stage 1: one per split
            if end == start:
                continue
            logits = torch.einsum("qhd,nd->qhn", rows, keys[start:end]) * scale
            lse = torch.logsumexp(logits, dim=-1, keepdim=True)
            parts.append(torch.einsum("qhn,nd->qhd", torch.exp(logits - lse),
                                      keys[start:end, :value_dim]))
            lses.append(lse)
        if not parts:  # stage 2 with no split to combine: 0 / 0
            o[qo[b]:qo[b + 1]] = float("nan")
            continue
        lse_all = torch.stack(lses)  # stage 2: the splits weighted by their log-sum-exps
        weights = torch.softmax(lse_all, dim=0)
        o[qo[b]:qo[b + 1]] = (weights * torch.stack(parts)).sum(0).to(o.dtype)
