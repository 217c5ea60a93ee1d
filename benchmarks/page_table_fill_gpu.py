"""The unified page-1 page-table fill's cost per replay: `aiter` vs `aiter-ext` on a CUDA GPU.

With ``SGLANG_USE_AITER_UNIFIED_ATTN=1``, page size 1 and no sliding window, upstream's graph
metadata leaves the page table the kernel reads unfilled, so ``aiter-ext`` fills it after
upstream's replay metadata (``backend/page_table.py``): one more copy per replay, on the only
path where it runs. This measures it side by side, as ``benchmarks/backend_gpu.py`` does for the
paths without the fill (same harness, same interleaving, ``aiter`` timed twice for the noise):
the replay metadata call for 1, 8, 32, 128 and P real requests in the smallest captured graph
that holds them, GPU time (CUDA events) and CPU time, as the ratio ``aiter-ext / aiter``. The
result also records the status ``aiter-ext``'s graph set-up reported for the fill, so a run where
the fill did not apply says so.

    python3 -m benchmarks.page_table_fill_gpu --rounds 500     # on the GPU machine
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
from benchmarks.backend_gpu import CAPTURE, POOL, REAL_REQUESTS, _build, _summarise, _time_metadata
from benchmarks.backend_gpu import decode_batches as _decode_batches
from gpu import buffer_pool_graphs as harness  # blocks aiter first
from sglang_aiter_plugin.selftest.reference import fill_paged_requests
from testkit.sglang_setup import SCENARIOS, configure, write_model_dir

ROOT = Path(__file__).resolve().parents[1]
PAGE = 1  # the fill runs at page size 1 only
PATH = "unified"
FILL = "unified-page-table"  # the graph set-up status of the fill (backend/defects.py)


def run(setup: Any, rounds: int) -> dict[str, Any]:
    backends = {kind: _build(kind, setup, PATH)[0] for kind in ("aiter", "aiter-ext")}
    fill = next((str(s) for s in backends["aiter-ext"].graph_fixes if s.name == FILL), None)
    gen = torch.Generator().manual_seed(3)
    per_n: dict[str, Any] = {}
    for n in REAL_REQUESTS:
        bs, batches = _decode_batches(backends, setup, n, gen)
        batches["aiter (again)"] = batches["aiter"]
        replay = _summarise(_time_metadata(batches, False, rounds))
        per_n[str(n)] = {"graph_bs": bs, "replay": replay}
        print(f"  page {PAGE} {PATH} n={n} (graph bs {bs}): replay gpu ratio "
              f"{replay['ratio_gpu']:.3f} (noise {replay['noise_gpu']:.3f}), cpu ratio "
              f"{replay['ratio_cpu']:.3f} (noise {replay['noise_cpu']:.3f})",
              file=sys.stderr, flush=True)
    return {"fill_status": fill, "metadata": per_n}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="the unified page-1 fill's cost per replay")
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--out", type=Path,
                        default=ROOT / "benchmarks/results/page_table_fill_gpu.json")
    args = parser.parse_args(argv)
    harness.install_kernel_doubles()
    import triton

    model_dir = write_model_dir(Path(tempfile.mkdtemp()) / "tiny-llama")
    setup = configure(model_dir, SCENARIOS["two-batch-overlap"],
                      ("--page-size", str(PAGE), *CAPTURE), device="cuda", pool=POOL)
    fill_paged_requests(setup.runner, POOL, PAGE, seed=0)
    print(f"capture sizes {setup.capture_bs}, max_bs {setup.max_bs}, P {POOL}", file=sys.stderr)
    result: dict[str, Any] = {
        **run_facts("page_table_fill_gpu"),
        "gpu": torch.cuda.get_device_name(), "triton": triton.__version__,
        "pool": POOL, "page_size": PAGE, "path": PATH, "capture_bs": setup.capture_bs,
        "max_bs": setup.max_bs, "rounds": args.rounds,
    }
    with setup.scope:
        result.update(run(setup, args.rounds))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
