"""GPU evidence for ``mla-split-table`` (aiter#4587): MLA decode graphs through aiter's own
``mla.py`` (its ``get_meta_param`` cache and its Triton stage-2 reduce; only the HIP stage 1 is a
double, ``testkit/doubles/aiter_mla_gpu.py``), upstream ``AiterAttnBackend`` against ``aiter-ext``.

For each head count (DeepSeek's 16 a rank at TP 8, 128 at TP 1 or under DP attention; latent 512,
rope 64) and backend, on sglang's real pools with a request pool of 33 under two-batch overlap
(graphs up to 34 rows). ``--kv-cache-dtype auto`` (bf16 KV) takes sglang's non-persistent MLA
path; ``fp8_e4m3`` its persistent path, whose work schedule sglang writes into its own buffers at
every captured size, before each capture and each replay (aiter's HIP schedule, persistent stage 1
and ``mla_reduce_v1``: the torch doubles of ``testkit/doubles/aiter_mla_persistent.py``; the
queries in fp8 too, as sglang's schedule call declares them). Run each KV type in its own
process: sglang's backend sets the persistent switch module-wide.

1. a decode graph at every size sglang captures (below and above the pool), as sglang's graph
   runner captures it: the capture metadata, two warm-ups and the capture on one side stream;
2. every graph replayed with real requests, each real row against a torch reference;
3. ``--eager`` eager decodes with distinct KV totals on the capture stream (each a new key of
   aiter's cache: more than its 128 entries evict every graph's table);
4. ``--reuse`` allocations on that stream filled with random int32 (what a later owner writes
   into the freed tables), then every graph replayed again with real requests.

Prints one ``RESULT {json}`` line per result; the exit status is 0 whatever the results.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

import torch

from gpu import buffer_pool_graphs as bpg  # blocks aiter first
from sglang_aiter_plugin.selftest.decode import RowShape, build_backend, requests_for
from sglang_aiter_plugin.selftest.decode_batch import DecodeBatch
from sglang_aiter_plugin.selftest.mlp_sync import plain_batch
from sglang_aiter_plugin.selftest.reference import fill_paged_requests
from testkit.doubles import aiter_mla_gpu, aiter_mla_persistent
from testkit.doubles.aiter_triton import tree_at
from testkit.sglang_setup import SCENARIOS, configure, write_model_dir

emit = bpg.emit
TOLERANCE = 2e-2  # bf16


def _model(root: Path, heads: int) -> Path:
    model = write_model_dir(root / f"deepseek-{heads}", mla=True, aiter_mla_dims=True)
    config = json.loads((model / "config.json").read_text())
    config.update(num_attention_heads=heads, num_key_value_heads=heads)
    (model / "config.json").write_text(json.dumps(config))
    return model


class Graph:
    """One decode graph, captured as sglang's runner captures it."""

    def __init__(self, backend: Any, shape: RowShape, setup: Any, bs: int,
                 stream: torch.cuda.Stream, q_dtype: torch.dtype) -> None:
        self.batch = DecodeBatch(backend, bs, "cuda", q_width=shape.heads * shape.q_dim)
        self.batch.q = self.batch.q.to(q_dtype)
        self.q_dtype = q_dtype
        self.batch.fb.token_to_kv_pool = setup.runner.token_to_kv_pool
        with torch.cuda.stream(stream):
            self.batch.metadata(in_capture=True)
            for _ in range(2):
                self.batch.forward(shape.layer)
        stream.synchronize()
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph, stream=stream):
            self.out = self.batch.forward(shape.layer)
        self.shape = shape

    def replay_error(self, gen: torch.Generator, pool: int, max_len: int) -> float:
        reqs, lens = requests_for(self.batch.bs, pool, gen, max_len)
        q = self.shape.queries(len(reqs), gen, "cuda").to(self.q_dtype)
        out = self.batch.run(self.shape.layer, reqs, lens, q, (self.graph, self.out))
        torch.cuda.synchronize()
        return self.shape.error(out, q, reqs, lens)


def run(kind: str, setup: Any, mla: Any, args: argparse.Namespace, heads: int) -> None:
    mla.get_meta_param.cache_clear()
    pool = int(setup.runner.req_to_token_pool.size)
    backend = build_backend(kind, setup)
    backend.init_cuda_graph_state(setup.max_bs, setup.max_bs)
    status = {s.name: str(s) for s in getattr(backend, "graph_fixes", ())}.get("mla-split-table")
    shape = RowShape(backend, setup)
    from sglang.srt.layers.attention import aiter_backend

    persistent = bool(aiter_backend._use_mla_ps_kernel)  # set module-wide by the backend
    q_dtype = backend.kv_cache_dtype if persistent else shape.dtype
    stream = torch.cuda.Stream()
    graphs = [Graph(backend, shape, setup, bs, stream, q_dtype) for bs in setup.capture_bs]
    gen = torch.Generator().manual_seed(1)
    before = [g.replay_error(gen, pool, args.max_len) for g in graphs]
    with torch.cuda.stream(stream):
        for total in range(1, args.eager + 1):  # one new cache key each
            fb = plain_batch(1, "cuda", lens=[total])
            fb.req_to_token_pool = setup.runner.req_to_token_pool
            fb.token_to_kv_pool = setup.runner.token_to_kv_pool
            backend.init_forward_metadata(fb)
            backend.forward_decode(torch.zeros(1, shape.heads * shape.q_dim, dtype=q_dtype,
                                               device="cuda"), None, None, shape.layer, fb,
                                   save_kv_cache=False)
        junk = [torch.randint(-2**31, 2**31 - 1, (64,), dtype=torch.int32, device="cuda")
                for _ in range(args.reuse)]
    torch.cuda.synchronize()
    info = mla.get_meta_param.cache_info()
    after = [g.replay_error(gen, pool, args.max_len) for g in graphs]
    keeper = getattr(backend, "split_tables", None)
    emit(part="graphs", kind=kind, heads=heads, pool=pool, capture_bs=setup.capture_bs,
         kv_cache=str(backend.kv_cache_dtype), path="persistent" if persistent else
         "non-persistent", status=status, held=None if keeper is None else len(keeper.held),
         eager_decodes=args.eager, reuse_allocations=len(junk),
         cache={"hits": info.hits, "misses": info.misses, "currsize": info.currsize,
                "maxsize": info.maxsize},
         max_err_before=max(before), max_err_after=max(after),
         wrong_sizes_after=[bs for bs, e in zip(setup.capture_bs, after, strict=True)
                            if not e < TOLERANCE],
         ok=bool(max(before) < TOLERANCE and max(after) < TOLERANCE))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--aiter-tree", required=True,
                        help="folder holding aiter/mla.py and an AITER_ORIGIN line")
    parser.add_argument("--kinds", default="aiter-ext,upstream")
    parser.add_argument("--heads", default="16,128")
    parser.add_argument("--eager", type=int, default=136)
    parser.add_argument("--reuse", type=int, default=20000)
    parser.add_argument("--max-len", type=int, default=300)
    parser.add_argument("--kv-cache-dtype", default="auto", choices=("auto", "fp8_e4m3"))
    args = parser.parse_args()
    mod = bpg.install_kernel_doubles()
    tree = tree_at(args.aiter_tree)
    mla = aiter_mla_gpu.load_mla(tree)
    aiter_mla_gpu.MAX_TOKENS = aiter_mla_persistent.MAX_TOKENS = args.max_len
    mod.mla_decode_fwd = mla.mla_decode_fwd  # what ``from aiter.mla import ...`` binds on ROCm
    mod.get_mla_metadata_info_v1 = aiter_mla_persistent.metadata_info
    mod.get_mla_metadata_v1 = aiter_mla_persistent.metadata
    import sglang

    emit(part="versions", sglang=sglang.__version__, torch=torch.__version__,
         triton=__import__("triton").__version__, gpu=torch.cuda.get_device_name(),
         aiter=tree.origin, cache_maxsize=mla.get_meta_param.cache_parameters()["maxsize"])
    root = Path(tempfile.mkdtemp())
    for heads in (int(h) for h in args.heads.split(",")):
        setup = configure(_model(root, heads), SCENARIOS["two-batch-overlap"],
                          ("--kv-cache-dtype", args.kv_cache_dtype), device="cuda")
        with setup.scope:
            fill_paged_requests(setup.runner, int(setup.runner.req_to_token_pool.size), 1,
                                seed=0)
            for kind in args.kinds.split(","):
                try:
                    run(kind, setup, mla, args, heads)
                except Exception as exc:  # evidence, not a crash: record what happened
                    emit(part="graphs", kind=kind, heads=heads,
                         error=f"{type(exc).__name__}: {exc}"[:500])


if __name__ == "__main__":
    main()
