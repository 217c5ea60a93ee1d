"""Start-up cost of the plugin as on a ROCm host, where every collective fix installs its wrapper.

Off ROCm the collective fixes install nothing (``benchmarks/startup.py`` measures that case).
Here each child process first enters the ROCm platform double (``testkit/doubles/rocm_platform``:
sglang's ``is_hip()`` and friends answer as on an MI300X; nothing else is simulated), then times
sglang's real ``load_plugins()`` with the plugin installed and not installed, interleaved:

* ``launcher``: after ``import sglang.launch_server`` (as in every process that runs collectives,
  ``parallel_state`` is imported), so the fixes probe and install during ``load_plugins()``;
  the child checks that every collective wrapper is in place;
* ``bare``: nothing imported first; the collective decision waits for ``parallel_state``, so the
  child also times that import afterwards (the probes and installs then run inside it).

Variants: the plugin installed, installed with the collective fixes switched off
(``SGLANG_AITER_EXT_DISABLE``: the difference is what their probes and installs cost), and not
installed. A separate child times importing the collective fix modules alone (they are imported
whenever the plugin loads, switched off or not).

A third child runs ``register()``'s steps one by one, in its order, and times each (the
breakdown in ``benchmarks/RESULTS.md``).

The plugin's bytecode is compiled first, as ``pip install`` does. The installed ``launcher``
child also times sglang's own ``HookRegistry._propagate_patch`` once
per wrapped method: the module walk that registering the wrappers through ``HookRegistry`` would
have added to ``load_plugins()``.

    .venv/bin/python -m benchmarks.startup_rocm --runs 10
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._format import run_facts
from benchmarks.startup import _overlays, _popen_wait4, _run, _summary

ROOT = Path(__file__).resolve().parents[1]
from sglang_aiter_plugin.fixes import BUILTIN_FIXES  # noqa: E402

METHODS = ("_all_gather_into_tensor", "_maybe_aiter_reduce_scatter", "fused_allreduce_rmsnorm",
           "fused_allreduce_rmsnorm_quant_per_group")
COLLECTIVES = tuple(name for name, _ in BUILTIN_FIXES if name.startswith("capture-"))
#: The modules the collective fixes live in (``BUILTIN_FIXES`` values are ``module[:object]``).
COLLECTIVE_MODULES = sorted({value.partition(":")[0] for name, value in BUILTIN_FIXES
                             if name in COLLECTIVES})
IMPORTS = """
import sys, time
sys.path.append({root!r})
from testkit.doubles.rocm_platform import simulated_rocm
rocm = simulated_rocm()
rocm.__enter__()
import sglang.launch_server
import pluggy, sglang_aiter_plugin.plugin.spec, sglang_aiter_plugin._status
import sglang_aiter_plugin._post_import, sglang_aiter_plugin.fixes
t = time.perf_counter()
for name in {modules!r}:
    __import__(name)
print("RESULT " + str((time.perf_counter() - t) * 1000))
"""
CHILD = """
import json, sys, time
sys.path.append({root!r})  # the ROCm platform double only; the plugin comes from the overlay
from testkit.doubles.rocm_platform import simulated_rocm
rocm = simulated_rocm()
rocm.__enter__()
{pre}from sglang.srt.plugins import load_plugins
import gc
collecting = [0.0, 0.0]  # start of the running collection, seconds spent collecting
def timed_gc(phase, info):
    if phase == "start":
        collecting[0] = time.perf_counter()
    else:
        collecting[1] += time.perf_counter() - collecting[0]
gc.callbacks.append(timed_gc)
t = time.perf_counter(); load_plugins(); call = time.perf_counter() - t
gc.callbacks.remove(timed_gc)
gc_ms = collecting[1] * 1000
t = time.perf_counter()
import sglang.srt.distributed.parallel_state as ps
after = time.perf_counter() - t
members = ps.GroupCoordinator.__dict__
wrapped = sorted(n for n in {methods!r} if hasattr(members.get(n), "__wrapped__"))
def walk(name):  # a function: no module-level name may hold the method while sglang walks
    import inspect
    from sglang.srt.plugins.hook_registry import _propagate_patch
    original = inspect.unwrap(ps.GroupCoordinator.__dict__[name])
    t = time.perf_counter()
    found = _propagate_patch(original, original, ps.GroupCoordinator)
    return [(time.perf_counter() - t) * 1000, found]
walks = {{n: walk(n) for n in wrapped}} if {walk} else {{}}
print("RESULT " + json.dumps({{"call_ms": call * 1000, "ps_ms": after * 1000, "gc_ms": gc_ms,
                               "wrapped": wrapped, "walk": walks, "modules": len(sys.modules)}}))
"""
PRELUDES = {"launcher": "import sglang.launch_server; ", "bare": ""}
#: Where the plugin's part of load_plugins() goes: register()'s steps, run one by one, in the
#: order register() runs them, in a launcher process with the plugin installed.
PHASES = """
import importlib, json, sys, time
sys.path.append({root!r})
from testkit.doubles.rocm_platform import simulated_rocm
rocm = simulated_rocm()
rocm.__enter__()
import sglang.launch_server
from importlib.metadata import entry_points
entry_points(group="sglang.srt.plugins")  # what sglang's loader does just before register()
ms = {{}}
def step(label, fn):
    t = time.perf_counter()
    value = fn()
    ms[label] = ms.get(label, 0.0) + (time.perf_counter() - t) * 1000
    return value
step("import pluggy", lambda: importlib.import_module("pluggy"))
step("import the plugin's core modules", lambda: (
    importlib.import_module("sglang_aiter_plugin"),
    importlib.import_module("sglang_aiter_plugin._registration"),
    importlib.import_module("sglang_aiter_plugin.plugin.manager")))
from sglang_aiter_plugin import _registration
from sglang_aiter_plugin._sglang import installed_sglang_version
from sglang_aiter_plugin._switches import read_switches
from sglang_aiter_plugin.fixes import BUILTIN_FIXES
from sglang_aiter_plugin.plugin import manager
from sglang_aiter_plugin.plugin.spec import FixContext
switches = read_switches([name for name, _ in BUILTIN_FIXES])
for name, value in BUILTIN_FIXES:
    label = "collectives" if name.startswith("capture-") else name
    module = value.partition(":")[0]
    step(f"import the {{label}} fix modules", lambda: importlib.import_module(module))
pm = step("pluggy manager, hook specs, registering the fixes",
          lambda: manager.PluginManager(BUILTIN_FIXES))
call_fix = manager._call_fix
def timed(name, function, context):
    label = "collectives" if name.startswith("capture-") else name
    return step(f"apply {{label}} (probes, installs)", lambda: call_fix(name, function, context))
manager._call_fix = timed
context = FixContext(plugin_version="bench", sglang_version=installed_sglang_version())
statuses = pm.apply_fixes(context)
step("the log line", lambda: _registration._log_summary(switches, statuses))
print("RESULT " + json.dumps(ms))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Start-up cost of the plugin as on ROCm")
    parser.add_argument("--runs", type=int, default=10, help="samples per variant")
    parser.add_argument("--out", type=Path,
                        default=ROOT / "benchmarks/results/startup_rocm.json")
    args = parser.parse_args(argv)
    _popen_wait4()
    # an installed wheel has its bytecode compiled (pip does it); this checkout may not
    compileall.compile_dir(str(ROOT / "sglang_aiter_plugin"), quiet=1)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    samples: dict[str, dict[str, list[float]]] = {}
    last: dict[str, Any] = {}
    imports: list[float] = []
    phases: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        paths = _overlays(Path(tmp))
        envs = {"installed": {**base_env, "PYTHONPATH": str(paths["with"])},
                "collectives off": {**base_env, "PYTHONPATH": str(paths["with"]),
                                    "SGLANG_AITER_EXT_DISABLE": ",".join(COLLECTIVES)},
                "not installed": {**base_env, "PYTHONPATH": str(paths["without"])}}
        names = [(v, p) for p in PRELUDES for v in envs]
        for i in range(args.runs + 1):  # the first round warms the page cache, not recorded
            names = names[1:] + names[:1]
            for variant, pre in names:
                code = CHILD.format(root=str(ROOT), pre=PRELUDES[pre], methods=METHODS,
                                    walk=variant == "installed" and pre == "launcher")
                _, _, out, _ = _run([sys.executable, "-S", "-c", code], envs[variant], Path(tmp))
                data = json.loads(out.split("RESULT ", 1)[1])
                key = f"{variant}, {pre}"
                last[key] = data
                if i:
                    for k in ("call_ms", "ps_ms", "gc_ms"):
                        samples.setdefault(key, {}).setdefault(k, []).append(data[k])
                    for n, (ms, _) in data["walk"].items():
                        samples.setdefault(key, {}).setdefault(f"walk {n}", []).append(ms)
            if i:
                code = PHASES.format(root=str(ROOT))
                _, _, out, _ = _run([sys.executable, "-S", "-c", code], envs["installed"],
                                    Path(tmp))
                for label, value in json.loads(out.split("RESULT ", 1)[1]).items():
                    phases.setdefault(label, []).append(value)
                code = IMPORTS.format(root=str(ROOT), modules=COLLECTIVE_MODULES)
                _, _, out, _ = _run([sys.executable, "-S", "-c", code], envs["installed"],
                                    Path(tmp))
                imports.append(float(out.split("RESULT ", 1)[1]))
            print(f"round {i}/{args.runs}", file=sys.stderr, flush=True)
    result: dict[str, Any] = {
        **run_facts("startup_rocm"),
        "ms": {key: {k: _summary(v) for k, v in series.items()}
               for key, series in samples.items()},
        "wrapped": {key: data["wrapped"] for key, data in last.items()},
        "walk_found": {n: found for n, (_, found) in last["installed, launcher"]["walk"].items()},
        "modules": {key: data["modules"] for key, data in last.items()},
    }
    ms = result["ms"]
    for pre in PRELUDES:
        result[f"added_call_ms_{pre}"] = (ms[f"installed, {pre}"]["call_ms"]["median"]
                                          - ms[f"not installed, {pre}"]["call_ms"]["median"])
    result["added_ps_import_ms_bare"] = (ms["installed, bare"]["ps_ms"]["median"]
                                         - ms["not installed, bare"]["ps_ms"]["median"])
    for pre in PRELUDES:
        result[f"collectives_apply_ms_{pre}"] = (
            ms[f"installed, {pre}"]["call_ms"]["median"]
            - ms[f"collectives off, {pre}"]["call_ms"]["median"])
    result["collectives_import_ms"] = _summary(imports)
    result["phases_ms"] = {label: _summary(values) for label, values in phases.items()}
    result["walk_ms_total"] = sum(v["median"] for k, v in ms["installed, launcher"].items()
                                  if k.startswith("walk "))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items()
                      if k.startswith(("added_", "walk_ms", "collectives_"))}))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
