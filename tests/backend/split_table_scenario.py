"""The split-table scenario (aiter#4587) on CPU, run in a child with Triton's interpreter by
``test_split_tables.py``: sglang's real MLA backend code over the double of aiter's ``mla.py``
memory contract (``testkit/doubles/aiter_mla.py``).

A DeepSeek-shaped config (latent 512 + rope 64, 16 heads a rank, bf16 KV: sglang's
non-persistent MLA kernel) under two-batch overlap (graphs up to 34 rows over a pool of 33).
Graphs are captured at every size sglang captures, as its graph runner does it (capture metadata,
two warm-ups, the capture); every graph replays with real requests; then more than 128 eager
decodes with distinct KV totals evict every graph's cache entry, and the graphs replay again.
"""

from __future__ import annotations

import gc
import tempfile
from pathlib import Path
from typing import Any

import torch

from sglang_aiter_plugin.selftest.decode import RowShape, build_backend, requests_for
from sglang_aiter_plugin.selftest.decode_batch import DecodeBatch
from sglang_aiter_plugin.selftest.mlp_sync import plain_batch
from sglang_aiter_plugin.selftest.reference import fill_paged_requests
from testkit.doubles import aiter_mla
from testkit.sglang_setup import POOL, SCENARIOS, Setup, configure, write_model_dir

__all__ = ["MAX_LEN", "run"]

MAX_LEN = 40


class Captured:
    """One captured decode graph: its static batch, the recorded graph and its output."""

    def __init__(self, backend: Any, shape: RowShape, setup: Setup, bs: int) -> None:
        self.batch = DecodeBatch(backend, bs, "cpu", q_width=shape.heads * shape.q_dim)
        self.batch.fb.token_to_kv_pool = setup.runner.token_to_kv_pool  # 0.5.11 reads it here
        self.batch.metadata(in_capture=True)
        for _ in range(2):  # sglang's graph runner warms up twice before it captures
            self.batch.forward(shape.layer)
        with aiter_mla.capture() as graph:
            self.out = self.batch.forward(shape.layer)
        self.graph, self.shape = graph, shape

    def replay_error(self, gen: torch.Generator) -> float:
        """Replay with real requests; the largest difference of a real row from the reference."""
        reqs, lens = requests_for(self.batch.bs, POOL, gen, MAX_LEN)
        q = self.shape.queries(len(reqs), gen, "cpu")
        out = self.batch.run(self.shape.layer, reqs, lens, q, (self.graph, self.out))
        return self.shape.error(out, q, reqs, lens)


def _eager_decodes(backend: Any, shape: RowShape, setup: Setup, totals: range) -> None:
    """One eager decode (sglang's ``init_forward_metadata``) per KV total: a new cache key each."""
    for total in totals:
        fb = plain_batch(1, lens=[total])
        fb.req_to_token_pool = setup.runner.req_to_token_pool
        fb.token_to_kv_pool = setup.runner.token_to_kv_pool
        backend.init_forward_metadata(fb)
        backend.forward_decode(torch.zeros(1, shape.heads * shape.q_dim, dtype=shape.dtype),
                               None, None, shape.layer, fb, save_kv_cache=False)


def _one(kind: str, setup: Setup) -> dict[str, Any]:
    aiter_mla.get_meta_param.cache_clear()
    backend = build_backend(kind, setup)
    backend.init_cuda_graph_state(setup.max_bs, setup.max_bs)
    shape = RowShape(backend, setup)
    graphs = [Captured(backend, shape, setup, bs) for bs in setup.capture_bs]
    gen = torch.Generator().manual_seed(5)
    before = [g.replay_error(gen) for g in graphs]
    eager = aiter_mla.CACHE_ENTRIES + 8
    _eager_decodes(backend, shape, setup, range(1, eager + 1))
    gc.collect()
    after = [g.replay_error(gen) for g in graphs]
    keeper = getattr(backend, "split_tables", None)
    return {
        "capture_bs": list(setup.capture_bs), "pool": POOL, "eager_decodes": eager,
        "cache_entries": aiter_mla.get_meta_param.cache_info().currsize,
        "before": before, "after": after,
        "held": None if keeper is None else [
            [int(splits), table.tolist()] for splits, table in keeper.held.values()],
        "statuses": {s.name: [s.state.value, s.detail]
                     for s in getattr(backend, "graph_fixes", ())},
    }


def run() -> dict[str, Any]:
    """Both backends, each on a fresh configuration of the same model."""
    from sglang.srt.layers.attention import aiter_backend

    aiter_backend.mla_decode_fwd = aiter_mla.mla_decode_fwd  # what ``import aiter`` binds
    model = write_model_dir(Path(tempfile.mkdtemp()) / "deepseek", mla=True, aiter_mla_dims=True)
    out = {}
    for kind in ("aiter-ext", "upstream"):
        setup = configure(model, SCENARIOS["two-batch-overlap"])
        with setup.scope:
            fill_paged_requests(setup.runner, POOL, 1, seed=3)
            out[kind] = _one(kind, setup)
    return out
