"""Start-up cost of the plugin on CPU (no GPU needed).

Measures, interleaved in one run so machine noise hits every variant alike:

* whole-process wall time and peak RSS of
  ``python -c "from sglang.srt.plugins import load_plugins; load_plugins()"`` with the plugin
  installed and enabled, installed but switched off (``SGLANG_AITER_EXT=0``), and not installed;
* the time of the ``load_plugins()`` call itself, measured inside each process (far less noisy
  than the whole process), in a bare process and in one that imported what sglang's launcher has
  imported when it calls ``load_plugins()``;
* the import time of ``sglang_aiter_plugin`` alone (``python -X importtime``);
* which modules the plugin's load adds (nothing ROCm-specific may appear).

"Not installed" is real: every variant runs with ``-S`` on a PYTHONPATH overlay of the
environment's site-packages (symlinks), with or without this project's distribution in it.

    .venv/bin/python -m benchmarks.startup --runs 15
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchmarks._format import run_facts

ROOT = Path(__file__).resolve().parents[1]
LOAD = ("import json, sys, time; {pre}from sglang.srt.plugins import load_plugins; "
        "t = time.perf_counter(); load_plugins(); t = time.perf_counter() - t; "
        "print('CALL_MS ' + str(t * 1000)); print('MODULES ' + json.dumps(sorted(sys.modules)))")
#: What the process imported before load_plugins(): nothing (a bare process), or what sglang's
#: launcher (python -m sglang.launch_server) has imported when it calls load_plugins().
PRELUDES = {"bare": "", "launcher": "import sglang.launch_server; "}


def _overlay(root: Path, plugin: Iterable[Path]) -> Path:
    """A PYTHONPATH root at ``root``: the environment's site-packages (symlinks) without this
    project, plus the ``plugin`` entries (an install of it); another sglang release first."""
    site = Path(sysconfig.get_paths()["purelib"])
    root.mkdir()
    for entry in site.iterdir():
        if entry.suffix != ".pth" and "sglang_aiter_plugin" not in entry.name:
            (root / entry.name).symlink_to(entry)
    for entry in plugin:
        (root / entry.name).symlink_to(entry)
    extra = os.environ.get("PYTHONPATH", "")  # another sglang release first, as tools/with-sglang
    return Path(f"{extra}:{root}" if extra else str(root))


def _overlays(tmp: Path) -> dict[str, Path]:
    """Two PYTHONPATH roots: the environment with and without this checkout installed."""
    site = Path(sysconfig.get_paths()["purelib"])
    checkout = [*site.glob("sglang_aiter_plugin-*.dist-info"), ROOT / "sglang_aiter_plugin"]
    return {"with": _overlay(tmp / "with", checkout), "without": _overlay(tmp / "without", [])}


def _run(args: list[str], env: dict[str, str], cwd: Path) -> tuple[float, int, str, str]:
    start = time.perf_counter()
    # cwd matters: `python -c` puts it on sys.path, and a source checkout there holds metadata
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=cwd)
    out, err = proc.communicate()
    seconds = time.perf_counter() - start
    # peak RSS of exactly this child (ru_maxrss of RUSAGE_CHILDREN would be the max of all)
    peak_kib = _last_rusage_kib(proc.pid)
    if proc.returncode != 0:
        raise RuntimeError(f"{args} failed:\n{err[-2000:]}")
    return seconds, peak_kib, out, err


_rss: dict[int, int] = {}


def _last_rusage_kib(pid: int) -> int:
    return _rss.get(pid, 0)


def _popen_wait4() -> None:
    """Make Popen reap children with wait4 so each child's own peak RSS is kept."""
    original = subprocess.Popen._try_wait  # type: ignore[attr-defined]

    def _try_wait(self: subprocess.Popen[str], wait_flags: int) -> tuple[int, int]:
        try:
            pid, status, usage = os.wait4(self.pid, wait_flags)
        except ChildProcessError:
            return original(self, wait_flags)  # type: ignore[no-any-return]
        if pid:
            _rss[pid] = usage.ru_maxrss
        return pid, status

    subprocess.Popen._try_wait = _try_wait  # type: ignore[attr-defined]


PROFILE = """
import cProfile, json, pstats, sys
{pre}from sglang.srt.plugins import load_plugins
profile = cProfile.Profile()
profile.enable()
load_plugins()
profile.disable()
stats = pstats.Stats(profile).stats
wanted = {{
    "load_plugins() in all": ("sglang/srt/plugins/__init__.py", "load_plugins"),
    "the plugin's register()": ("sglang_aiter_plugin/_registration.py", "register"),
    "  plugin manager set-up (pluggy, the fixes registered)":
        ("sglang_aiter_plugin/plugin/manager.py", "__init__"),
    "  the fixes' probes and registrations":
        ("sglang_aiter_plugin/plugin/manager.py", "apply_fixes"),
    "sglang's HookRegistry.apply_hooks()": ("sglang/srt/plugins/hook_registry.py", "apply_hooks"),
    "  of which _propagate_patch (walks every loaded module)":
        ("sglang/srt/plugins/hook_registry.py", "_propagate_patch"),
}}
out = {{}}
for label, (path, name) in wanted.items():
    ms = [v[3] * 1000 for (file, _, fn), v in stats.items() if file.endswith(path) and fn == name]
    out[label] = round(max(ms), 2) if ms else 0.0
print("PROFILE " + json.dumps(out))
"""


def _profile(env: dict[str, str], cwd: Path, pre: str) -> dict[str, float]:
    """Cumulative ms by step of one load_plugins() under cProfile (inflates Python-heavy steps)."""
    code = PROFILE.format(pre=PRELUDES[pre])
    proc = subprocess.run([sys.executable, "-S", "-c", code], env=env, cwd=cwd,
                          capture_output=True, text=True)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith("PROFILE ")]
    if not line:
        raise RuntimeError(proc.stderr[-2000:])
    return json.loads(line[-1][len("PROFILE "):])  # type: ignore[no-any-return]


def _summary(values: list[float]) -> dict[str, float]:
    q = statistics.quantiles(values, n=4) if len(values) >= 4 else [min(values), 0, max(values)]
    return {"median": statistics.median(values), "q1": q[0], "q3": q[-1],
            "min": min(values), "max": max(values), "n": len(values)}


def _import_time_us(env: dict[str, str], cwd: Path) -> int:
    proc = subprocess.run([sys.executable, "-S", "-X", "importtime", "-c",
                           "import sglang_aiter_plugin"], env=env, capture_output=True, text=True,
                          cwd=cwd)
    for line in proc.stderr.splitlines():
        m = re.match(r"import time:\s+\d+\s+\|\s+(\d+)\s+\|\s*sglang_aiter_plugin$", line)
        if m:
            return int(m.group(1))
    raise RuntimeError(proc.stderr[-2000:])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Start-up cost of sglang-aiter-plugin on CPU")
    parser.add_argument("--runs", type=int, default=15, help="samples per variant")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/startup.json")
    args = parser.parse_args(argv)
    _popen_wait4()
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    with tempfile.TemporaryDirectory() as tmp:
        paths = _overlays(Path(tmp))
        variants = {
            "installed": {**base_env, "PYTHONPATH": str(paths["with"])},
            "disabled": {**base_env, "PYTHONPATH": str(paths["with"]), "SGLANG_AITER_EXT": "0"},
            "not installed": {**base_env, "PYTHONPATH": str(paths["without"])},
        }
        seconds: dict[str, list[float]] = {v: [] for v in variants}
        peaks: dict[str, list[float]] = {v: [] for v in variants}
        calls: dict[str, list[float]] = {f"{v}, {p}": [] for p in PRELUDES for v in variants}
        modules: dict[str, set[str]] = {}
        names = [(v, p) for p in PRELUDES for v in variants]
        for i in range(args.runs + 1):  # the first round warms the page cache, not recorded
            names = names[1:] + names[:1]  # rotate so no variant always runs first
            for name, pre in names:
                code = LOAD.format(pre=PRELUDES[pre])
                s, kib, out, _ = _run([sys.executable, "-S", "-c", code], variants[name],
                                      Path(tmp))
                call_ms = float(out.split("CALL_MS ", 1)[1].split()[0])
                if pre == "bare":
                    modules[name] = set(json.loads(out.split("MODULES ", 1)[1]))
                if i:
                    calls[f"{name}, {pre}"].append(call_ms)
                    if pre == "bare":
                        seconds[name].append(s * 1000)
                        peaks[name].append(kib / 1024)
            print(f"round {i}/{args.runs}", file=sys.stderr, flush=True)
        imports = [_import_time_us(variants["installed"], Path(tmp)) for _ in range(args.runs)]
        profiles = {pre: _profile(variants["installed"], Path(tmp), pre) for pre in PRELUDES}
    added = sorted(modules["installed"] - modules["not installed"])
    rocm = [m for m in added if m.split(".")[0] in ("aiter", "triton", "torch")]
    result: dict[str, Any] = {
        **run_facts("startup"),
        "wall_ms": {k: _summary(v) for k, v in seconds.items()},
        "peak_rss_mib": {k: _summary(v) for k, v in peaks.items()},
        "import_us": _summary([float(x) for x in imports]),
        "load_plugins_call_ms": {k: _summary(v) for k, v in calls.items()},
        "profile_ms_installed": profiles,
        "modules_added_by_plugin": added,
        "rocm_or_torch_modules_added": rocm,
    }
    for k in ("installed", "disabled"):
        result[f"added_ms_{k}"] = (result["wall_ms"][k]["median"]
                                   - result["wall_ms"]["not installed"]["median"])
        for pre in PRELUDES:
            call = result["load_plugins_call_ms"]
            result[f"added_call_ms_{k}_{pre}"] = (call[f"{k}, {pre}"]["median"]
                                                  - call[f"not installed, {pre}"]["median"])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k.startswith("added_")}))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
