"""`aiter-ext` against `aiter` in real sglang servers on a CUDA GPU: start-up to ready, and decode
throughput with sglang's decode CUDA graphs.

    python3 -m benchmarks.server_gpu --rounds 25     # on the GPU machine (gpu/README.md)

Three servers of the same tiny Qwen3 (float32, the checkpoint of the end-to-end tests), each
through the test doubles of the GPU tier (aiter's kernels as capture-safe references): `aiter`,
`aiter-ext`, and `aiter` again (the noise). They start one after another (each start timed
alone, launch to ready), then serve together-idle: each round sends every server in turn (the
order rotated per round) the same batch of 6 prompts x 128 greedy tokens, one server busy at a
time, and times it. The ratios are of medians: `aiter-ext / aiter` against `aiter (again) /
aiter`; the paired ratios are the medians (and quartiles) of the same ratio taken round by round,
which a drift of the machine over the run moves less. Writes ``benchmarks/results/server_gpu.json``.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._format import run_facts
from testkit.server import CUDA, Server, launch
from testkit.tiny_checkpoint import write_checkpoint

ROOT = Path(__file__).resolve().parents[1]
DOUBLES = "aiter,capture-safe,rocm-host,dual-gemm,graph-replays"
VARIANTS = (("aiter", "aiter"), ("aiter-ext", "aiter-ext"), ("aiter (again)", "aiter"))
POOL, GRAPH_MAX_BS, NEW_TOKENS = 6, 8, 128


def _stats(xs: list[float]) -> dict[str, float]:
    q = statistics.quantiles(xs, n=4) if len(xs) > 1 else [xs[0]] * 3
    return {"median": statistics.median(xs), "q1": q[0], "q3": q[2], "n": len(xs)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=25)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/server_gpu.json")
    args = parser.parse_args(argv)
    import torch
    import triton

    work = Path(tempfile.mkdtemp())
    model = write_checkpoint(work / "tiny-qwen3", seed=0)
    rng = random.Random(7)
    prompts = [[rng.randrange(3, 512) for _ in range(rng.randint(8, 32))] for _ in range(POOL)]
    servers: dict[str, Server] = {}
    ready_s: dict[str, float] = {}
    try:
        for label, backend in VARIANTS:
            start = time.monotonic()
            servers[label] = launch(model, backend, work / label.replace(" ", "-"),
                                    doubles=DOUBLES, max_running=POOL, platform=CUDA,
                                    graph_max_bs=GRAPH_MAX_BS)
            ready_s[label] = time.monotonic() - start
            servers[label].generate(prompts, 8)  # warm: the first request compiles kernels
        tokens_per_s: dict[str, list[float]] = {label: [] for label, _ in VARIANTS}
        labels = [label for label, _ in VARIANTS]
        for r in range(args.rounds):
            for label in labels[r % 3:] + labels[:r % 3]:
                start = time.perf_counter()
                outs = servers[label].generate(prompts, NEW_TOKENS)
                seconds = time.perf_counter() - start
                tokens_per_s[label].append(sum(len(o.tokens) for o in outs) / seconds)
    finally:
        for server in servers.values():
            server.stop()
    stats = {label: _stats(v) for label, v in tokens_per_s.items()}
    paired = {label: _stats([x / a for x, a in zip(v, tokens_per_s["aiter"], strict=True)])
              for label, v in tokens_per_s.items() if label != "aiter"}
    base = stats["aiter"]["median"]
    result: dict[str, Any] = {
        **run_facts("server_gpu"), "gpu": torch.cuda.get_device_name(),
        "triton": triton.__version__, "pool": POOL, "graph_max_bs": GRAPH_MAX_BS,
        "new_tokens": NEW_TOKENS, "prompts": len(prompts), "rounds": args.rounds,
        "ready_s": ready_s, "tokens_per_s": stats, "per_round": tokens_per_s,
        "paired_ratio": paired["aiter-ext"], "paired_noise": paired["aiter (again)"],
        "throughput_ratio": stats["aiter-ext"]["median"] / base,
        "throughput_noise": stats["aiter (again)"]["median"] / base,
        "ready_ratio": ready_s["aiter-ext"] / ready_s["aiter"],
        "ready_noise": ready_s["aiter (again)"] / ready_s["aiter"],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: result[k] for k in ("ready_s", "throughput_ratio", "throughput_noise",
                                             "paired_ratio", "paired_noise", "ready_ratio",
                                             "ready_noise")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
