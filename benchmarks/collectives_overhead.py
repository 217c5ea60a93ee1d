"""Per-call cost of each installed collective wrapper on the eager path (CPU), as on ROCm.

On a simulated ROCm host (``testkit/doubles/rocm_platform``; gfx95, so the per-group-quant path
is taken) sglang's real ``load_plugins()`` installs every collective wrapper the release needs.
Each wrapped ``GroupCoordinator`` method is then called with the recording communicator double
(``testkit/doubles/communicator.py``) eagerly (not capturing: the path every step outside CUDA
graphs takes), through the wrapper and below it (``inspect.unwrap``), interleaved; ns per call
and ratios. The floor is sglang's own ``HookRegistry`` wrapper around a do-nothing AROUND hook
(what any hook registered through sglang's mechanism costs); the noise is sglang's method timed
twice. A second process swaps in methods that honour every switch
(``testkit/doubles/future_collectives.py``): each fix must say ``not needed`` and install nothing.

    .venv/bin/python -m benchmarks.collectives_overhead
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import statistics
import subprocess
import sys
import timeit
from pathlib import Path
from typing import Any

from benchmarks._format import run_facts
from testkit.collective_facts import METHOD_FIXES as METHODS  # method -> fix

ROOT = Path(__file__).resolve().parents[1]


NOT_NEEDED = """
import sys, json
sys.path.insert(0, %(root)r)
from testkit.doubles.rocm_platform import simulated_rocm
rocm = simulated_rocm()
rocm.__enter__()
from sglang.srt.distributed import parallel_state as ps
from testkit.doubles import future_collectives as future
swaps = {"_all_gather_into_tensor": future.all_gather_honouring_every_switch,
         "_maybe_aiter_reduce_scatter": future.reduce_scatter_honouring_every_switch,
         "fused_allreduce_rmsnorm": future.fused_honouring_every_switch,
         "fused_allreduce_rmsnorm_quant_per_group": future.quant_honouring_every_switch}
for name, fn in swaps.items():
    setattr(ps.GroupCoordinator, name, fn)
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang_aiter_plugin._registration import last_statuses
states = {s.name: s.state.value for s in last_statuses() if s.name in %(fixes)r}
untouched = all(ps.GroupCoordinator.__dict__[n] is fn for n, fn in swaps.items())
print("RESULT " + json.dumps({"states": states, "methods_untouched": untouched}))
"""


class _NullList(list):  # type: ignore[type-arg]
    def append(self, item: Any) -> None:
        pass


def _layers(fn: Any) -> int:
    n = 0
    while hasattr(fn, "__wrapped__"):
        fn, n = fn.__wrapped__, n + 1
    return n


def _args(name: str) -> tuple[Any, ...]:
    import torch

    if name == "_all_gather_into_tensor":
        return torch.zeros((2, 8)), torch.ones((1, 8))
    if name == "_maybe_aiter_reduce_scatter":
        return torch.zeros((1, 8)), torch.ones((2, 8))
    return torch.ones((1, 128)), torch.ones((1, 128)), torch.ones(128), 1e-6


_ROCM: list[Any] = []  # the platform double's block lasts as long as the manager is referenced


def _setup() -> tuple[dict[str, Any], dict[str, Any]]:
    from testkit.doubles.rocm_platform import simulated_rocm

    _ROCM.append(simulated_rocm(is_gfx95_supported=True))
    _ROCM[-1].__enter__()  # for the whole run: sglang's eager AITER paths ask is_hip()
    os.environ["SGLANG_DP_USE_REDUCE_SCATTER"] = "1"  # their defaults are on only for HIP
    os.environ["SGLANG_USE_AITER_AG"] = "1"
    from sglang.srt.distributed import parallel_state as ps
    from sglang.srt.plugins import load_plugins
    from sglang.srt.plugins.hook_registry import HookType, _wrap_fn

    load_plugins()
    from sglang_aiter_plugin._registration import last_statuses
    from testkit.doubles.communicator import RecordingCommunicator

    statuses = {s.name: {"state": s.state.value, "detail": s.detail} for s in last_statuses()}
    benches: dict[str, Any] = {}
    for name in METHODS:
        hooked = ps.GroupCoordinator.__dict__.get(name)
        if not hasattr(hooked, "__wrapped__"):
            continue
        upstream = inspect.unwrap(hooked)
        comm = RecordingCommunicator(capturing=False)
        comm.calls = _NullList()  # keep memory flat over millions of calls
        coordinator: Any = object.__new__(ps.GroupCoordinator)
        coordinator.ca_comm, coordinator.world_size = comm, 2
        args = _args(name)
        floor = _wrap_fn(upstream, lambda original, *a, **kw: original(*a, **kw),
                         HookType.AROUND)
        bound = getattr(coordinator, name)
        benches[name] = {
            "wrapped": lambda b=bound, a=args: b(*a),
            "do-nothing AROUND hook": lambda f=floor, c=coordinator, a=args: f(c, *a),
            "upstream": lambda u=upstream, c=coordinator, a=args: u(c, *a),
            "upstream (again)": lambda u=upstream, c=coordinator, a=args: u(c, *a),
        }
        results = {k: repr(v())[:40] for k, v in benches[name].items()}
        assert len(set(results.values())) == 1, (name, results)  # same answer every way
        benches[name]["layers"] = _layers(hooked)
    return benches, statuses


def _summary(values: list[float]) -> dict[str, float]:
    q = statistics.quantiles(values, n=4)
    return {"median": statistics.median(values), "q1": q[0], "q3": q[-1],
            "min": min(values), "max": max(values), "n": len(values)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Eager-path cost of the collective wrappers")
    parser.add_argument("--repeats", type=int, default=30, help="interleaved samples per variant")
    parser.add_argument("--number", type=int, default=20000, help="calls per sample")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    benches, statuses = _setup()
    samples: dict[str, dict[str, list[float]]] = {
        m: {k: [] for k in b if k != "layers"} for m, b in benches.items()}
    for i in range(args.repeats):
        for method, bench in benches.items():
            for variant in samples[method]:
                seconds = timeit.timeit(bench[variant], number=args.number)
                samples[method][variant].append(seconds / args.number * 1e9)
        if i % 10 == 9:
            print(f"{i + 1}/{args.repeats}", file=sys.stderr, flush=True)
    fixes = sorted(set(METHODS.values()))
    proc = subprocess.run([sys.executable, "-c", NOT_NEEDED % {"root": str(ROOT), "fixes": fixes}],
                          capture_output=True, text=True, cwd=ROOT)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    future = json.loads(line[-1][7:]) if line else {"error": proc.stderr[-1500:]}

    methods = {}
    for method, series in samples.items():
        ns = {k: _summary(v) for k, v in series.items()}
        methods[method] = {
            "fix": METHODS[method],
            "layers": benches[method]["layers"],
            "ns_per_call": ns,
            "ratio_wrapped_vs_upstream": ns["wrapped"]["median"] / ns["upstream"]["median"],
            "ratio_wrapped_vs_do_nothing_hook": (ns["wrapped"]["median"]
                                                 / ns["do-nothing AROUND hook"]["median"]),
            "noise_ratio_upstream_twice": (ns["upstream (again)"]["median"]
                                           / ns["upstream"]["median"]),
        }
    result = {
        **run_facts("collectives_overhead"),
        "statuses": {f: statuses[f] for f in fixes if f in statuses},
        "methods": methods,
        "not_needed_case": future,
    }
    path = args.out or ROOT / f"benchmarks/results/collectives_overhead-{result['sglang']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2))
    print(json.dumps({m: {k: round(v, 3) for k, v in r.items() if k.startswith(("ratio", "noise"))}
                      for m, r in methods.items()}))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
