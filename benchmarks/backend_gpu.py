"""`aiter` vs `aiter-ext` on a CUDA GPU: per-step metadata cost, graph memory, capture time.

Both backends are sglang's real code (``AiterAttnBackend`` and the plugin's subclass), configured
by sglang's own parser (two-batch overlap, a request pool P = 129, so the padded graph batch is
130), with aiter's kernels replaced by the reference kernels of
``testkit/doubles/aiter_gpu_kernels.py`` (there is no ROCm on an NVIDIA GPU; the metadata code,
including sglang's Triton kv-indices kernel, is sglang's own). Every measurement interleaves the
variants round by round; the noise is ``aiter`` timed twice (the same backend object under a
second name).

1. Per-step metadata: ``init_forward_metadata_out_graph(in_capture=False)`` (0.5.23; the replay
   method on older releases) and the capture-time metadata call, for 1, 8, 32, 128 and P real
   requests in the smallest captured graph that holds them: the GPU time (CUDA events) and the
   CPU time of the call (where a Python indirection would show).
2. Graph memory and capture time: device bytes each backend holds after
   ``init_cuda_graph_state(max_bs)``, the difference, and what the padded rows need by the
   buffers' own sizes; the time to capture the decode graphs at every batch size.

    python3 benchmarks/backend_gpu.py --rounds 300     # on the GPU machine (see gpu/README.md)
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from benchmarks._format import run_facts
from gpu import buffer_pool_graphs as harness  # blocks aiter first
from sglang_aiter_plugin.selftest.reference import fill_paged_requests
from testkit.sglang_setup import SCENARIOS, configure, write_model_dir

ROOT = Path(__file__).resolve().parents[1]

POOL = 129
REAL_REQUESTS = (1, 8, 32, 128, POOL)
# sglang adds the padded P (130) as a graph size only when a listed size exceeds it
CAPTURE = ("--cuda-graph-bs-decode", "1", "2", "8", "32", "128", "160")
KINDS = ("aiter", "aiter-ext")


def _summary(values: list[float]) -> dict[str, float]:
    q = statistics.quantiles(values, n=4)
    return {"median": statistics.median(values), "q1": q[0], "q3": q[-1], "n": len(values)}


def _build(kind: str, setup: Any, path: str) -> tuple[Any, int]:
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    backend = harness.build("upstream" if kind == "aiter" else "aiter-ext", setup, path)
    torch.cuda.synchronize()
    return backend, torch.cuda.memory_allocated() - before


def _padded_need(ext: Any, upstream: Any) -> dict[str, int]:
    """Bytes the pool holds beyond upstream, buffer by buffer (what the padded rows need)."""
    need = {}
    for name in ext.buffer_pool.names():
        mine = ext.buffer_pool.tensor(name)
        theirs = getattr(upstream, name)
        extra = mine.numel() * mine.element_size() - theirs.numel() * theirs.element_size()
        if extra:
            need[name] = extra
    return need


def time_calls(calls: dict[str, Callable[[], Any]], rounds: int
               ) -> dict[str, dict[str, list[float]]]:
    """Each call of ``calls`` timed ``rounds`` times, interleaved, after 20 warm-up rounds:
    GPU time (CUDA events) and CPU time, in microseconds, per name."""
    gpu: dict[str, list[float]] = {k: [] for k in calls}
    cpu: dict[str, list[float]] = {k: [] for k in calls}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    for i in range(rounds + 20):  # 20 warm-up rounds, not recorded
        for name, call in calls.items():
            torch.cuda.synchronize()
            start.record()
            t0 = time.perf_counter()
            call()
            t1 = time.perf_counter()
            end.record()
            end.synchronize()
            if i >= 20:
                cpu[name].append((t1 - t0) * 1e6)
                gpu[name].append(start.elapsed_time(end) * 1e3)
    return {"gpu_us": gpu, "cpu_us": cpu}


def _time_metadata(batches: dict[str, Any], in_capture: bool, rounds: int
                   ) -> dict[str, dict[str, list[float]]]:
    return time_calls({name: functools.partial(batch.metadata, in_capture=in_capture)
                       for name, batch in batches.items()}, rounds)


def _capture_all(backend: Any, setup: Any) -> float:
    layer = harness.make_layer(backend)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for bs in sorted(setup.capture_bs, reverse=True):  # sglang captures largest first
        batch = harness.DecodeBatch(backend, bs, "cuda")
        batch.metadata(in_capture=True)
        batch.forward(layer)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            batch.forward(layer)
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def decode_batches(
    backends: dict[str, Any], setup: Any, n: int, gen: torch.Generator
) -> tuple[int, dict[str, Any]]:
    """The same ``n`` real requests for each backend, in the smallest captured graph for ``n``."""
    bs = min(b for b in setup.capture_bs if b >= n)
    reqs, lens = harness.decode_rows(setup, POOL, n, gen)
    batches = {}
    for kind, backend in backends.items():
        q = torch.randn(len(reqs), backend.num_head, backend.head_dim, generator=gen)
        batch = harness.DecodeBatch(backend, bs, "cuda")
        batch.set(reqs, lens, q.to(backend.input_dtype).cuda())
        batches[kind] = batch
    return bs, batches


def run(path: str, setup: Any, rounds: int) -> dict[str, Any]:
    backends, held = {}, {}
    for kind in KINDS:
        backends[kind], held[kind] = _build(kind, setup, path)
    need = _padded_need(backends["aiter-ext"], backends["aiter"])
    gen = torch.Generator().manual_seed(3)
    per_n: dict[str, Any] = {}
    for n in REAL_REQUESTS:
        bs, batches = decode_batches(backends, setup, n, gen)
        batches["aiter (again)"] = batches["aiter"]
        replay = _time_metadata(batches, False, rounds)
        capture = _time_metadata(batches, True, max(rounds // 3, 30))
        per_n[str(n)] = {"graph_bs": bs, "replay": _summarise(replay),
                         "capture": _summarise(capture)}
        print(f"  {path} n={n} (graph bs {bs}): replay gpu ratio "
              f"{per_n[str(n)]['replay']['ratio_gpu']:.3f}, cpu ratio "
              f"{per_n[str(n)]['replay']['ratio_cpu']:.3f}", file=sys.stderr, flush=True)
    capture_s: dict[str, list[float]] = {k: [] for k in KINDS}
    for _ in range(3):
        for kind in KINDS:  # first round compiles the reference kernels for both alike
            capture_s[kind].append(_capture_all(backends[kind], setup))
    return {
        "held_bytes": held,
        "extra_bytes_measured": held["aiter-ext"] - held["aiter"],
        "extra_bytes_needed_by_buffer": need,
        "extra_bytes_needed": sum(need.values()),
        "metadata": per_n,
        "capture_all_s": {k: v[1:] for k, v in capture_s.items()},
        "capture_ratio": statistics.median(capture_s["aiter-ext"][1:])
        / statistics.median(capture_s["aiter"][1:]),
    }


def _summarise(t: dict[str, dict[str, list[float]]]) -> dict[str, Any]:
    out: dict[str, Any] = {f"{clock}": {k: _summary(v) for k, v in d.items()}
                           for clock, d in t.items()}
    for clock, key in (("gpu_us", "gpu"), ("cpu_us", "cpu")):
        med = {k: v["median"] for k, v in out[clock].items()}
        out[f"ratio_{key}"] = med["aiter-ext"] / med["aiter"]
        out[f"noise_{key}"] = med["aiter (again)"] / med["aiter"]
    return out


def gpu_main(
    benchmark: str,
    description: str,
    rounds: int,
    run_path: Callable[[str, Any, int], Any],
    argv: list[str] | None = None,
) -> int:
    """Parse the common options, configure sglang on the GPU, run ``run_path`` per decode path and
    write ``benchmarks/results/<benchmark>.json`` (shared by the GPU benchmarks)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--paths", default="ragged,unified")
    parser.add_argument("--out", type=Path, default=ROOT / f"benchmarks/results/{benchmark}.json")
    args = parser.parse_args(argv)
    harness.install_kernel_doubles()
    import triton

    model_dir = write_model_dir(Path(tempfile.mkdtemp()) / "tiny-llama")
    setup = configure(model_dir, SCENARIOS["two-batch-overlap"], (*harness.FLAGS, *CAPTURE),
                      device="cuda", pool=POOL)
    fill_paged_requests(setup.runner, POOL, harness.PAGE, seed=0)
    print(f"capture sizes {setup.capture_bs}, max_bs {setup.max_bs}, P {POOL}", file=sys.stderr)
    result: dict[str, Any] = {
        **run_facts(benchmark),
        "gpu": torch.cuda.get_device_name(), "triton": triton.__version__,
        "pool": POOL, "capture_bs": setup.capture_bs, "max_bs": setup.max_bs,
        "rounds": args.rounds, "paths": {},
    }
    with setup.scope:
        for path in args.paths.split(","):
            result["paths"][path] = run_path(path, setup, args.rounds)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    return gpu_main("backend_gpu", "aiter vs aiter-ext metadata cost on a GPU", 300, run, argv)


if __name__ == "__main__":
    sys.exit(main())
