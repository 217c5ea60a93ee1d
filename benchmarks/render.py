"""Render benchmarks/results/*.json into benchmarks/RESULTS.md and PNG plots.

    .venv/bin/python -m benchmarks.render      (from the repository root)

Every number in RESULTS.md comes from a JSON file written by one of the benchmark scripts, which
records its own command, machine, versions and date; this script only formats them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks._format import fmt, header
from benchmarks.render_capacity import pool_capacity
from benchmarks.render_gpu import backend_gpu, bounds_check

ROOT = Path(__file__).resolve().parent
RESULTS = ROOT / "results"

Section = Callable[[dict[str, Any], Path], list[str]]


def _startup(data: dict[str, Any], _: Path) -> list[str]:
    lines = ["## Start-up cost on CPU", "", *header(data)]
    lines += ["| variant | wall time of `load_plugins()` process | peak RSS |",
              "| --- | --- | --- |"]
    for variant, wall in data["wall_ms"].items():
        lines.append(f"| {variant} | {fmt(wall, 'ms')} | "
                     f"{fmt(data['peak_rss_mib'][variant], 'MiB')} |")
    calls = data.get("load_plugins_call_ms", {})
    if calls:
        lines += ["", "The `load_plugins()` call alone, timed inside each process:", "",
                  "| variant | bare process | after the imports sglang's launcher has done |",
                  "| --- | --- | --- |"]
        for variant in data["wall_ms"]:
            lines.append(f"| {variant} | {fmt(calls[f'{variant}, bare'], 'ms')} | "
                         f"{fmt(calls[f'{variant}, launcher'], 'ms')} |")
    lines += [
        "",
        f"- Whole process, installed vs not installed (median minus median): "
        f"{data['added_ms_installed']:+.1f} ms; switched off (`SGLANG_AITER_EXT=0`): "
        f"{data['added_ms_disabled']:+.1f} ms. Compare with the IQRs above: on this shared "
        "2-CPU machine the whole-process time cannot resolve a few milliseconds.",
    ]
    for pre in ("bare", "launcher"):
        key = f"added_call_ms_installed_{pre}"
        if key in data:
            lines.append(
                f"- `load_plugins()` call, {pre}: the plugin adds **{data[key]:+.1f} ms** "
                f"(switched off: {data[f'added_call_ms_disabled_{pre}']:+.1f} ms).")
    for pre, steps in data.get("profile_ms_installed", {}).items():
        lines += ["", f"Where the time goes, one `load_plugins()` under cProfile ({pre}; "
                  "cProfile inflates Python-heavy steps):", "", "| step | ms |", "| --- | --- |"]
        lines += [f"| {label.strip()} | {ms:.1f} |" for label, ms in steps.items()]
    us = {k: v / 1000 if k != "n" else v for k, v in data["import_us"].items()}
    lines += [
        "",
        f"- `import sglang_aiter_plugin` alone (`-X importtime`, cumulative): "
        f"{fmt(us, 'ms', 2)}.",
        f"- Modules the plugin's load adds to a bare process: "
        f"{len(data['modules_added_by_plugin'])} "
        f"({', '.join(data['modules_added_by_plugin'][:12])}"
        f"{' …' if len(data['modules_added_by_plugin']) > 12 else ''}); ROCm, torch or triton "
        f"modules among them: {', '.join(data['rocm_or_torch_modules_added']) or 'none'}.",
        "",
    ]
    return lines


def _reduce_scatter(data: dict[str, Any], _: Path) -> list[str]:
    fix, future = data["fix"], data["not_needed_case"]
    lines = [f"## reduce-scatter-tms hook, eager path, sglang {data['sglang']} (CPU)", "",
             *header(data),
             f"- Fix status: **{fix['state']}** ({fix['detail']}); "
             f"wrapper layers: {fix['layers']}.",
             "", "| variant | ns per call |", "| --- | --- |"]
    lines += [f"| {k} | {fmt(v, 'ns', 0)} |" for k, v in data["ns_per_call"].items()]
    lines += [
        "",
        f"- Ratio hooked / upstream: **{data['ratio_hooked_vs_upstream']:.3f}**; hooked / "
        f"do-nothing AROUND hook (sglang's own wrapper, the floor of any hook): "
        f"**{data['ratio_hooked_vs_do_nothing_hook']:.3f}**; noise (upstream timed twice): "
        f"{data['noise_ratio_upstream_twice']:.3f}.",
        f"- Where the probe says `not needed` (a method that honours every switch swapped in): "
        f"state `{future.get('state')}`, hooks registered: {future.get('hooks_registered')}, "
        f"method untouched: {future.get('method_is_untouched')}.",
        "",
    ]
    return lines


SECTIONS: dict[str, Section] = {
    "startup": _startup,
    "reduce_scatter_overhead": _reduce_scatter,
    "backend_gpu": backend_gpu,
    "bounds_check": bounds_check,
    "pool_capacity": pool_capacity,
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS)
    parser.add_argument("--out", type=Path, default=ROOT / "RESULTS.md")
    args = parser.parse_args(argv)
    lines = ["# Benchmark results", "",
             "Generated by `python -m benchmarks.render` from `benchmarks/results/*.json`; each "
             "section names the command that measured it. Every ratio compares two variants "
             "measured side by side in one run (for the backend: `aiter-ext / aiter`).", ""]
    for path in sorted(args.results.glob("*.json")):
        data = json.loads(path.read_text())
        section = SECTIONS.get(data.get("benchmark", ""))
        if section is None:
            print(f"skipping {path.name}: unknown benchmark kind", file=sys.stderr)
            continue
        lines += section(data, args.out.parent)
    args.out.write_text("\n".join(lines))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
