"""Per-step cost of ``SGLANG_AITER_EXT_BOUNDS_CHECK=1`` on a GPU: checked vs plain ``aiter-ext``.

The same configuration as ``backend_gpu.py`` (sglang's real backend code, two-batch overlap,
P = 129, reference kernels for aiter's). Two ``aiter-ext`` backends, one built with the check, time
the per-step metadata call (``init_forward_metadata_out_graph(in_capture=False)`` on 0.5.23, the
replay method on older releases) interleaved round by round; the noise is the plain backend timed
twice. Reports GPU time (CUDA events) and CPU time of the call: the check is one Python call and
one comparison, so it can only show on the CPU clock.

    python3 benchmarks/bounds_check.py --rounds 500     # on the GPU machine (see gpu/README.md)
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch

from benchmarks.backend_gpu import (
    CAPTURE,
    POOL,
    REAL_REQUESTS,
    ROOT,
    _summary,
    _time_metadata,
    harness,
)
from tests.backend.sglang_setup import SCENARIOS, configure, write_model_dir

VAR = "SGLANG_AITER_EXT_BOUNDS_CHECK"


def _build(setup: Any, path: str, check: bool) -> Any:
    os.environ[VAR] = "1" if check else "0"
    try:
        return harness.build("aiter-ext", setup, path)
    finally:
        del os.environ[VAR]


def run(path: str, setup: Any, rounds: int) -> dict[str, Any]:
    backends = {"plain": _build(setup, path, False), "checked": _build(setup, path, True)}
    assert "init_forward_metadata_out_graph" in vars(backends["checked"]) or (
        "init_forward_metadata_replay_cuda_graph" in vars(backends["checked"])
    ), "the check was not installed"
    gen = torch.Generator().manual_seed(3)
    out: dict[str, Any] = {}
    for n in REAL_REQUESTS:
        bs = min(b for b in setup.capture_bs if b >= n)
        reqs, lens = harness.decode_rows(setup, POOL, n, gen)
        batches = {}
        for name, backend in backends.items():
            q = torch.randn(len(reqs), backend.num_head, backend.head_dim, generator=gen)
            batch = harness.DecodeBatch(backend, bs, "cuda")
            batch.set(reqs, lens, q.to(backend.input_dtype).cuda())
            batches[name] = batch
        batches["plain (again)"] = batches["plain"]
        timed = _time_metadata(batches, False, rounds)
        row: dict[str, Any] = {"graph_bs": bs}
        for clock, key in (("gpu_us", "gpu"), ("cpu_us", "cpu")):
            stats = {k: _summary(v) for k, v in timed[clock].items()}
            row[clock] = stats
            row[f"ratio_{key}"] = stats["checked"]["median"] / stats["plain"]["median"]
            row[f"noise_{key}"] = stats["plain (again)"]["median"] / stats["plain"]["median"]
            row[f"delta_{key}_us"] = stats["checked"]["median"] - stats["plain"]["median"]
        out[str(n)] = row
        print(f"  {path} n={n}: cpu ratio {row['ratio_cpu']:.3f} (noise {row['noise_cpu']:.3f}),"
              f" gpu ratio {row['ratio_gpu']:.3f}", file=sys.stderr, flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="aiter-ext with vs without the bounds check")
    parser.add_argument("--rounds", type=int, default=500)
    parser.add_argument("--paths", default="ragged,unified")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/bounds_check.json")
    args = parser.parse_args(argv)
    harness.install_kernel_doubles()
    import sglang
    import triton

    model_dir = write_model_dir(Path(tempfile.mkdtemp()) / "tiny-llama")
    setup = configure(model_dir, SCENARIOS["two-batch-overlap"], (*harness.FLAGS, *CAPTURE),
                      device="cuda", pool=POOL)
    harness.fill_requests(setup.runner, POOL, seed=0)
    result: dict[str, Any] = {
        "benchmark": "bounds_check",
        "command": " ".join(["python3", *sys.argv]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "gpu": torch.cuda.get_device_name(),
        "torch": torch.__version__, "triton": triton.__version__, "sglang": sglang.__version__,
        "pool": POOL, "capture_bs": setup.capture_bs, "max_bs": setup.max_bs,
        "rounds": args.rounds, "paths": {},
    }
    with setup.scope:
        for path in args.paths.split(","):
            result["paths"][path] = run(path, setup, args.rounds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
