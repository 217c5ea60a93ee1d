"""What ``mla-split-table`` costs an eager MLA decode step: `aiter` vs `aiter-ext` on a CUDA GPU.

A replay runs no Python, so holding the split tables adds nothing to it. An eager MLA decode step
(a batch above the largest graph, or graphs off) goes through ``aiter-ext``'s copy of aiter's
``mla_decode_fwd``, whose ``get_meta_param`` is aiter's cached one plus a check of whether the
stream is capturing (``backend/split_tables.py``). This times one layer's eager decode
(``init_forward_metadata`` and ``forward_decode``) through aiter's own ``mla.py``
(``testkit/doubles/aiter_mla_gpu.py``: its cache and Triton stage 2; a torch stage 1) for 1, 8
and 32 requests, ``aiter`` and ``aiter-ext`` interleaved and ``aiter`` twice for the noise, after
both backends' graph set-up: CPU time per step and GPU time (CUDA events), as the ratio
``aiter-ext / aiter``.

    python3 -m benchmarks.mla_eager_gpu --aiter-tree TREE --rounds 300     # on the GPU machine
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

import torch

from benchmarks._format import run_facts
from benchmarks.backend_gpu import _summarise, time_calls
from gpu import buffer_pool_graphs as harness  # blocks aiter first
from gpu.mla_split_table import _model
from sglang_aiter_plugin.selftest.decode import RowShape, build_backend
from sglang_aiter_plugin.selftest.mlp_sync import plain_batch
from sglang_aiter_plugin.selftest.reference import fill_paged_requests
from testkit.doubles import aiter_mla_gpu
from testkit.doubles.aiter_triton import tree_at
from testkit.sglang_setup import SCENARIOS, configure

ROOT = Path(__file__).resolve().parents[1]
REQUESTS = (1, 8, 32)
HEADS = 16
LENGTH = 200


def _step(backend: Any, shape: RowShape, setup: Any, n: int) -> Any:
    fb = plain_batch("decode", n, "cuda", lens=[LENGTH] * n)
    fb.req_to_token_pool = setup.runner.req_to_token_pool
    fb.token_to_kv_pool = setup.runner.token_to_kv_pool
    q = torch.zeros(n, shape.heads * shape.q_dim, dtype=shape.dtype, device="cuda")

    def step() -> None:
        backend.init_forward_metadata(fb)
        backend.forward_decode(q, None, None, shape.layer, fb, save_kv_cache=False)

    return step


def run(setup: Any, rounds: int) -> dict[str, Any]:
    backends = {kind: build_backend(kind, setup) for kind in ("upstream", "aiter-ext")}
    for backend in backends.values():
        backend.init_cuda_graph_state(setup.max_bs, setup.max_bs)
    status = next(str(s) for s in backends["aiter-ext"].graph_fixes if s.name == "mla-split-table")
    out: dict[str, Any] = {"status": status, "per_n": {}}
    for n in REQUESTS:
        steps = {name: _step(backends[kind], RowShape(backends[kind], setup), setup, n)
                 for name, kind in (("aiter", "upstream"), ("aiter-ext", "aiter-ext"),
                                    ("aiter (again)", "upstream"))}
        summary = _summarise(time_calls(steps, rounds))
        out["per_n"][str(n)] = summary
        print(f"  n={n}: cpu ratio {summary['ratio_cpu']:.3f} (noise {summary['noise_cpu']:.3f}),"
              f" gpu ratio {summary['ratio_gpu']:.3f} (noise {summary['noise_gpu']:.3f})",
              file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="an eager MLA decode step, aiter vs aiter-ext")
    parser.add_argument("--aiter-tree", required=True, help="folder holding aiter/mla.py")
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/mla_eager_gpu.json")
    args = parser.parse_args(argv)
    module = harness.install_kernel_doubles()
    tree = tree_at(args.aiter_tree)
    module.mla_decode_fwd = aiter_mla_gpu.load_mla(tree).mla_decode_fwd
    aiter_mla_gpu.MAX_TOKENS = LENGTH
    import triton

    setup = configure(_model(Path(tempfile.mkdtemp()), HEADS), SCENARIOS["two-batch-overlap"],
                      device="cuda")
    pool = int(setup.runner.req_to_token_pool.size)
    fill_paged_requests(setup.runner, pool, 1, seed=0)
    result: dict[str, Any] = {
        **run_facts("mla_eager_gpu"), "gpu": torch.cuda.get_device_name(),
        "triton": triton.__version__, "aiter": tree.origin, "heads": HEADS, "length": LENGTH,
        "pool": pool, "capture_bs": setup.capture_bs, "rounds": args.rounds,
    }
    with setup.scope:
        result.update(run(setup, args.rounds))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
