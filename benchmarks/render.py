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
from benchmarks.render_gpu import (
    backend_gpu,
    bounds_check,
    mla_eager_gpu,
    page_table_fill_gpu,
    selftest_wall,
    server_gpu,
)

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


def _collectives_overhead(data: dict[str, Any], _: Path) -> list[str]:
    lines = [f"## Collective wrappers, eager path, sglang {data['sglang']} (CPU, as on ROCm)", "",
             *header(data)]
    lines += [f"- `{name}`: **{s['state']}** ({s['detail']})" for name, s in
              data["statuses"].items()]
    lines += ["", "| method | variant | ns per call |", "| --- | --- | --- |"]
    for method, r in data["methods"].items():
        lines += [f"| `{method}` | {k} | {fmt(v, 'ns', 0)} |" for k, v in r["ns_per_call"].items()]
    lines += ["", "| method | wrapper layers | wrapped / do-nothing AROUND hook | wrapped / "
              "sglang's method | noise (sglang's method timed twice) |",
              "| --- | --- | --- | --- | --- |"]
    for method, r in data["methods"].items():
        floor = r["ratio_wrapped_vs_do_nothing_hook"]
        lines.append(f"| `{method}` | {r['layers']} | **{floor:.3f}** | "
                     f"{r['ratio_wrapped_vs_upstream']:.3f} | "
                     f"{r['noise_ratio_upstream_twice']:.3f} |")
    future = data["not_needed_case"]
    lines += ["", "The do-nothing AROUND hook is sglang's own `HookRegistry` wrapper around a hook "
              "that only calls the original: the floor of any hook registered through sglang.",
              f"- Where every switch is honoured upstream (methods that do so swapped in): "
              f"states {future.get('states')}, methods untouched: "
              f"{future.get('methods_untouched')}.", ""]
    return lines


def _startup_rocm(data: dict[str, Any], _: Path) -> list[str]:
    ms, ratio = data["ms"], data["ratio"]
    lines = ["## Start-up cost as on a ROCm host (every collective wrapper installed)", "",
             *header(data),
             f"The plugin installed from its wheel, bytecode compiled, `torch.version.hip` set "
             f"(`{data['hip']}`) before sglang is imported; fresh processes, the plugin installed "
             "and not installed interleaved round by round.", "",
             "| variant | `load_plugins()` call | its CPU time | then `import parallel_state` |",
             "| --- | --- | --- | --- |"]
    for key, series in ms.items():
        lines.append(f"| {key} | {fmt(series['call_ms'], 'ms')} | {fmt(series['cpu_ms'], 'ms')} "
                     f"| {fmt(series['ps_ms'], 'ms')} |")

    def times(key: str) -> str:
        r = ratio[key]
        return (f"**{r['median']:.2f}x** (round by round: IQR {r['q1']:.2f} to {r['q3']:.2f}, "
                f"n={int(r['n'])}; {data['added_ms'][key]:+.1f} ms, median minus median; CPU "
                f"time {data['cpu_ratio'][key]['median']:.2f}x)")

    bare_ps = (ms["installed, bare"]["ps_ms"]["median"]
               - ms["not installed, bare"]["ps_ms"]["median"])
    lines += ["", f"- What the plugin adds to `load_plugins()`, as a multiple of what sglang's own "
              f"`load_plugins()` costs without it: after the launcher's imports "
              f"{times('installed, launcher')}; in a bare process {times('installed, bare')}, "
              f"where the collective decision waits for `parallel_state` (that import then takes "
              f"{bare_ps:+.1f} ms more)."]
    if "baseline installed, launcher" in ratio:
        lines.append(f"- The baseline checkout (`--baseline`), in the same rounds: after the "
                     f"launcher's imports {times('baseline installed, launcher')}; bare "
                     f"{times('baseline installed, bare')}.")
    if "installed without collective fixes, launcher" in ratio:
        lines.append(f"- With the three collective fixes disabled (`SGLANG_AITER_EXT_DISABLE`: "
                     f"nothing of the collectives imported or probed), what the plugin costs "
                     f"where a process takes no collective decision at load: after the launcher's "
                     f"imports {times('installed without collective fixes, launcher')}; bare "
                     f"{times('installed without collective fixes, bare')}.")
    walks = {k[5:]: v for k, v in ms["installed, launcher"].items() if k.startswith("walk ")}
    walked = ", ".join(f"`{k}` {fmt(v, 'ms')}" for k, v in walks.items())
    gc_ms = ", ".join(f"{key} {series['gc_ms']['median']:.1f} ms" for key, series in ms.items())
    lines += [
        f"- Wrappers in place after the launcher's `load_plugins()`: "
        f"{', '.join(data['wrapped']['installed, launcher']) or 'none'}; bare process, after "
        f"`import parallel_state`: {', '.join(data['wrapped']['installed, bare']) or 'none'}.",
        f"- What registering the wrappers through sglang's `HookRegistry` would have added: its "
        f"`_propagate_patch` module walk, timed once per wrapped method in the same launcher "
        f"processes: {walked}; **{data['walk_ms_total']:.1f} ms** together. Bindings it found to "
        f"replace: {data['walk_found']}.",
        f"- Garbage collection inside the `load_plugins()` call (medians): {gc_ms}. sglang's "
        "launcher imports leave garbage behind; the next collection frees it, in whichever call "
        "allocates next: with the plugin that falls inside `load_plugins()`, without it just "
        "after.", ""]
    steps = data["steps"]
    total = sum(v["ms"]["median"] for v in steps.values())
    lines += ["What each millisecond buys: `register()`'s steps run one by one in its order, "
              "timed inside a launcher process (installed, as on ROCm; medians):", "",
              "| step | ms | share | what it buys |", "| --- | --- | --- | --- |"]
    lines += [f"| {label} | {fmt(v['ms'], 'ms', 2)} | {v['ms']['median'] / total:.0%} | "
              f"{v['buys']} |" for label, v in steps.items()]
    lines += [f"| all steps (sum of medians) | {total:.2f} ms | 100% | |", ""]
    loader = ms["not installed, launcher"]["call_ms"]["median"]
    registry = steps["import pluggy"]["ms"]["median"]
    lines += [f"- Against sglang's own `load_plugins()` after the launcher's imports "
              f"({loader:.2f} ms): importing pluggy, the registry, alone takes {registry:.2f} ms "
              f"({registry / loader:.2f}x); every other step together {total - registry:.2f} ms "
              f"({(total - registry) / loader:.2f}x).", ""]
    modules = data["modules_ms"]
    pluggy = [m for m in modules if m.split(".")[0] == "pluggy"]
    rows = [(m, modules[m]["median"]) for m in modules if m not in pluggy]
    rows.append((f"pluggy ({len(pluggy)} modules)", sum(modules[m]["median"] for m in pluggy)))
    lines += ["Each module `load_plugins()` imports with the plugin: its own import time (found, "
              "loaded and run; the imports it makes excluded, as `-X importtime` counts), timed "
              "in a launcher process; medians, largest first:", "",
              "| module | ms |", "| --- | --- |"]
    lines += [f"| {name} | {value:.2f} |" for name, value in sorted(rows, key=lambda r: -r[1])]
    imports = sum(v for _, v in rows)
    lines += [f"| all {len(modules)} modules | {imports:.2f} |", ""]
    probes = sum(v["ms"]["median"] for k, v in steps.items() if k.startswith("apply capture-"))
    preloaded = [m for m, loaded in data.get("preloaded", {}).items() if loaded]
    lines += [f"- Of the plugin's part, importing modules takes {imports:.1f} ms ({len(pluggy)} of "
              f"them pluggy's, {sum(modules[m]['median'] for m in pluggy):.1f} ms; "
              f"{len(modules) - len(pluggy)} the plugin's own); the collective fixes' probes and "
              f"installs {probes:.1f} ms."]
    if preloaded:
        lines.append(f"- Already imported by sglang when it loads plugins (nothing to save by not "
                     f"using them): {', '.join(f'`{m}`' for m in preloaded)}.")
    return [*lines, ""]


SECTIONS: dict[str, Section] = {
    "startup": _startup,
    "startup_rocm": _startup_rocm,
    "collectives_overhead": _collectives_overhead,
    "backend_gpu": backend_gpu,
    "page_table_fill_gpu": page_table_fill_gpu,
    "mla_eager_gpu": mla_eager_gpu,
    "selftest_wall": selftest_wall,
    "bounds_check": bounds_check,
    "pool_capacity": pool_capacity,
    "server_gpu": server_gpu,
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
