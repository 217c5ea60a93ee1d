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

import os
import sys
from typing import Any

import torch

from benchmarks.backend_gpu import (
    REAL_REQUESTS,
    _summary,
    _time_metadata,
    decode_batches,
    gpu_main,
    harness,
)

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
        bs, batches = decode_batches(backends, setup, n, gen)
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
    return gpu_main("bounds_check", "aiter-ext with vs without the bounds check", 500, run, argv)


if __name__ == "__main__":
    sys.exit(main())
