"""Per-call cost of the ``reduce-scatter-tms`` hook on the eager path (CPU).

Calls sglang's real ``GroupCoordinator._maybe_aiter_reduce_scatter`` with the recording
communicator double (``testkit/doubles/communicator.py``), eagerly (not capturing: the path every
decode step outside CUDA graphs takes), through the hook and below it (``inspect.unwrap``),
interleaved, and reports ns per call and the ratio. The noise is the same variant timed twice.
A do-nothing AROUND hook applied by sglang's own ``HookRegistry`` wrapper is timed too: it
is the floor of any hook registered through sglang's mechanism. A second process swaps in a
method that honours every switch (``testkit/doubles/future_reduce_scatter.py``): the probe must
say ``not needed`` and install nothing.

    tools/with-sglang 0.5.15 .venv/bin/python benchmarks/reduce_scatter_overhead.py
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import timeit
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.modules.setdefault("aiter", None)  # type: ignore[arg-type]

NOT_NEEDED = """
import sys, json
sys.modules.setdefault("aiter", None)
sys.path.insert(0, %(root)r)
from sglang.srt.distributed import parallel_state as ps
from testkit.doubles.future_reduce_scatter import honouring_every_switch
ps.GroupCoordinator._maybe_aiter_reduce_scatter = honouring_every_switch
from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry
load_plugins()
from sglang_aiter_plugin._registration import last_statuses
status = {s.name: s for s in last_statuses()}["reduce-scatter-tms"]
installed = ps.GroupCoordinator.__dict__["_maybe_aiter_reduce_scatter"]
print("RESULT " + json.dumps({
    "state": status.state.value, "detail": status.detail,
    "method_is_untouched": installed is honouring_every_switch,
    "hooks_registered": len(HookRegistry._hooks.get(
        "sglang.srt.distributed.parallel_state.GroupCoordinator._maybe_aiter_reduce_scatter", [])),
}))
"""


def _setup() -> tuple[Any, Any, Any, Any, dict[str, Any]]:
    import torch
    from sglang.srt.distributed import parallel_state as ps
    from sglang.srt.plugins import load_plugins

    load_plugins()
    from sglang_aiter_plugin._registration import last_statuses
    from testkit.doubles.communicator import RecordingCommunicator

    status = {s.name: s for s in last_statuses()}["reduce-scatter-tms"]
    ps.is_hip = lambda: True  # ROCm cannot exist here; sglang's eager path needs it
    os.environ["SGLANG_DP_USE_REDUCE_SCATTER"] = "1"  # its default is on only for HIP
    hooked = ps.GroupCoordinator.__dict__["_maybe_aiter_reduce_scatter"]
    upstream = inspect.unwrap(hooked)
    comm = RecordingCommunicator(capturing=False)
    coordinator = object.__new__(ps.GroupCoordinator)
    coordinator.ca_comm, coordinator.world_size = comm, 2
    out, inp = torch.zeros((1, 8)), torch.ones((2, 8))
    comm.calls = _NullList()  # keep memory flat over millions of calls
    info = {"state": status.state.value, "detail": status.detail,
            "layers": _layers(hooked)}
    return coordinator, out, inp, upstream, info


class _NullList(list):  # type: ignore[type-arg]
    def append(self, item: Any) -> None:
        pass


def _layers(fn: Any) -> int:
    n = 0
    while hasattr(fn, "__wrapped__"):
        fn, n = fn.__wrapped__, n + 1
    return n


def _summary(values: list[float]) -> dict[str, float]:
    q = statistics.quantiles(values, n=4)
    return {"median": statistics.median(values), "q1": q[0], "q3": q[-1],
            "min": min(values), "max": max(values), "n": len(values)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Eager-path cost of the reduce-scatter hook")
    parser.add_argument("--repeats", type=int, default=30, help="interleaved samples per variant")
    parser.add_argument("--number", type=int, default=20000, help="calls per sample")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    coordinator, out, inp, upstream, info = _setup()
    from sglang.srt.plugins.hook_registry import HookType, _wrap_fn

    # the floor any AROUND hook registered through sglang's HookRegistry pays
    floor = _wrap_fn(upstream, lambda original, *a, **kw: original(*a, **kw), HookType.AROUND)
    variants = {
        "hooked": lambda: coordinator._maybe_aiter_reduce_scatter(out, inp),
        "do-nothing AROUND hook": lambda: floor(coordinator, out, inp),
        "upstream": lambda: upstream(coordinator, out, inp),
        "upstream (again)": lambda: upstream(coordinator, out, inp),
    }
    assert variants["hooked"]() is True
    assert variants["upstream"]() is True
    samples: dict[str, list[float]] = {k: [] for k in variants}
    for i in range(args.repeats):
        for name, fn in variants.items():
            seconds = timeit.timeit(fn, number=args.number)
            samples[name].append(seconds / args.number * 1e9)
        if i % 10 == 9:
            print(f"{i + 1}/{args.repeats}", file=sys.stderr, flush=True)
    ns = {k: _summary(v) for k, v in samples.items()}
    proc = subprocess.run([sys.executable, "-c", NOT_NEEDED % {"root": str(ROOT)}],
                          capture_output=True, text=True, cwd=ROOT)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    future = json.loads(line[-1][7:]) if line else {"error": proc.stderr[-1500:]}
    from importlib.metadata import version

    import torch

    result = {
        "benchmark": "reduce_scatter_overhead",
        "command": " ".join([Path(sys.executable).name, *sys.argv]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs, {platform.platform()}",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "sglang": version("sglang"),
        "fix": info,
        "ns_per_call": ns,
        "ratio_hooked_vs_upstream": ns["hooked"]["median"] / ns["upstream"]["median"],
        "noise_ratio_upstream_twice": ns["upstream (again)"]["median"] / ns["upstream"]["median"],
        "ratio_hooked_vs_do_nothing_hook": (ns["hooked"]["median"]
                                            / ns["do-nothing AROUND hook"]["median"]),
        "not_needed_case": future,
    }
    path = args.out or ROOT / f"benchmarks/results/reduce_scatter_overhead-{result['sglang']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: result[k] for k in ("ratio_hooked_vs_upstream",
                                             "ratio_hooked_vs_do_nothing_hook",
                                             "noise_ratio_upstream_twice")}))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
