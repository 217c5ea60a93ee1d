"""Start-up cost of the plugin on a ROCm host, as a ratio to what sglang's own loader costs.

The figure: how much longer ``load_plugins()`` takes with the plugin installed, as a multiple of
what it takes without it. Measured as in a user's processes, side by side in one run:

* the plugin is installed from its wheel (built from the checkout), its bytecode compiled as
  ``pip install`` does (explicitly: ``PYTHONDONTWRITEBYTECODE`` may be set where this runs);
* ``torch.version.hip`` is set before sglang is imported, as a ROCm build of torch sets it:
  sglang's ``is_hip()`` says yes, so every collective fix probes and installs its wrapper;
* fresh processes time ``load_plugins()`` after ``import sglang.launch_server`` (``launcher``,
  what sglang's launcher has imported when it loads plugins; the collective fixes decide there)
  or with nothing imported first (``bare``; the collective decision then waits for
  ``parallel_state``, whose import the child times afterwards), with the plugin installed and
  not installed, interleaved round by round (the order rotates).

Each round gives one ratio per prelude: (installed - not installed) / not installed. Where the
milliseconds go, also once per round: ``register()``'s steps run one by one, in its order, in a
launcher process (:data:`BUYS` says what each step buys), and each module ``load_plugins()``
imports with the plugin, its own import time (:data:`MODULES`).
The installed launcher child also times sglang's ``HookRegistry._propagate_patch`` once per
wrapped method: the module walk that registering the wrappers through ``HookRegistry`` would add.

``installed without collective fixes`` is the same install with the three collective fixes in
``SGLANG_AITER_EXT_DISABLE`` (pluggy blocks them: nothing of the collectives is imported or
probed): what the plugin costs where a process takes no collective decision at load.

``--baseline TREE`` measures another checkout's wheel as one more variant in the same rounds
(before and after a change, side by side)::

    .venv/bin/python -m benchmarks.startup_rocm --runs 12
    mkdir /tmp/base && git archive HEAD~1 | tar -x -C /tmp/base
    .venv/bin/python -m benchmarks.startup_rocm --runs 12 --baseline /tmp/base
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._format import run_facts
from benchmarks.startup import _overlay, _popen_wait4, _run, _summary
from sglang_aiter_plugin._switches import DISABLE_VAR
from sglang_aiter_plugin.fixes import BUILTIN_FIXES

ROOT = Path(__file__).resolve().parents[1]
HIP = "6.3.42131"  # a ROCm 6.3 build's torch.version.hip; only whether it is set matters
METHODS = ("_all_gather_into_tensor", "_maybe_aiter_reduce_scatter", "fused_allreduce_rmsnorm",
           "fused_allreduce_rmsnorm_quant_per_group")
ROCM = f"import torch; torch.version.hip = {HIP!r}  # before sglang reads it, as on ROCm\n"
NO_COLLECTIVES = "installed without collective fixes"  # a variant: no ", " (keys split on it)
PRELUDES = {"launcher": "import sglang.launch_server\n", "bare": ""}
CHILD = ROCM + """import json, sys, time
{pre}from sglang.srt.plugins import load_plugins
import gc
collecting = [0.0, 0.0]  # start of the running collection, seconds spent collecting
def timed_gc(phase, info):
    if phase == "start":
        collecting[0] = time.perf_counter()
    else:
        collecting[1] += time.perf_counter() - collecting[0]
gc.callbacks.append(timed_gc)
cpu = time.thread_time(); t = time.perf_counter(); load_plugins()
call, cpu = time.perf_counter() - t, time.thread_time() - cpu
gc.callbacks.remove(timed_gc)
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
print("RESULT " + json.dumps({{"call_ms": call * 1000, "cpu_ms": cpu * 1000,
                               "ps_ms": after * 1000, "gc_ms": collecting[1] * 1000,
                               "wrapped": wrapped, "walk": walks}}))
"""
#: What each of register()'s steps (:data:`STEPS`) buys the user.
BUYS = {
    "import the entry point and the registration": "`register()` itself: the switches "
        "(`SGLANG_AITER_EXT*`), the statuses, the sglang release and its support",
    "import pluggy": "the registry of the fixes (kept: each fix a pluggy plugin, "
        "`SGLANG_AITER_EXT_DISABLE` through pluggy's blocking)",
    "import the registry (hook spec, manager)": "the hook every fix implements, and one fix's "
        "failure isolated from the others",
    "import the attention-backend fix": "`--attention-backend aiter-ext`: the fold into `aiter`, "
        "the recorded choice, sglang's construction sites, the wait for sglang's modules",
    "import the collective fixes": "the three collective fixes: their ledgers, the decision, the "
        "wrapper and its views of aiter's communicator (the probe is imported where a fix decides)",
    "pluggy manager: hook spec, the fixes registered": "the fixes registered, those listed in "
        "`SGLANG_AITER_EXT_DISABLE` blocked",
    "apply attention-backend": "the CLI choice and the fold installed (sglang's `server_args` is "
        "imported), the construction sites armed for the backend registry",
    "apply capture-all-gather": "the probe imported (the first fix to decide), sglang's "
        "all-gather probed on a simulated ROCm capture (which conditions it ignores on this "
        "release), the wrapper installed where it does",
    "apply capture-reduce-scatter": "the same for the reduce-scatter",
    "apply capture-fused-ar-rmsnorm": "the same for both fused all-reduce+RMSNorm methods",
    "the log line": "the one start-up line with every fix's status",
}
#: register()'s steps one by one, in its order, in a launcher process with the plugin installed.
STEPS = ROCM + """import importlib, json, time
import sglang.launch_server
from importlib.metadata import entry_points
entry_points(group="sglang.srt.plugins")  # what sglang's loader does just before register()
ms = {}
def step(label, fn):
    t = time.perf_counter()
    value = fn()
    ms[label] = ms.get(label, 0.0) + (time.perf_counter() - t) * 1000
    return value
def imports(*names):
    return lambda: [importlib.import_module(n) for n in names]
step("import the entry point and the registration",
     imports("sglang_aiter_plugin", "sglang_aiter_plugin._registration"))
step("import pluggy", imports("pluggy"))
step("import the registry (hook spec, manager)", imports("sglang_aiter_plugin.plugin.manager"))
from sglang_aiter_plugin import _registration
from sglang_aiter_plugin.fixes import BUILTIN_FIXES
from sglang_aiter_plugin.plugin import manager
step("import the attention-backend fix", imports(dict(BUILTIN_FIXES)["attention-backend"]))
step("import the collective fixes", imports(*{v.partition(":")[0] for n, v in BUILTIN_FIXES
                                                 if n.startswith("capture-")}))
real_manager, call_fix = manager.PluginManager, manager._call_fix
def timed_manager(*args, **kwargs):
    return step("pluggy manager: hook spec, the fixes registered",
                lambda: real_manager(*args, **kwargs))
def timed_fix(name, function, context):
    return step(f"apply {name}", lambda: call_fix(name, function, context))
manager.PluginManager, manager._call_fix = timed_manager, timed_fix
real_summary = _registration._log_summary
_registration._log_summary = lambda *a: step("the log line", lambda: real_summary(*a))
_registration.register()
print("RESULT " + json.dumps(ms))
"""
#: Each module load_plugins() imports with the plugin: its own time to be found, loaded and run
#: (what the imports it makes take is subtracted), as ``-X importtime`` gives it for an import
#: statement, here also for ``importlib.import_module``, without printing a line per module.
MODULES = ROCM + """import importlib._bootstrap as bootstrap, json, sys, time
import sglang.launch_server
from sglang.srt.plugins import load_plugins
own, nested = {{}}, [0.0]
real = bootstrap._find_and_load  # every import of a module not yet loaded calls it
def timed(name, import_):
    if name in sys.modules:  # importlib.import_module of a loaded module calls it too
        return real(name, import_)
    outer, nested[0] = nested[0], 0.0
    t = time.perf_counter()
    try:
        return real(name, import_)
    finally:
        took = time.perf_counter() - t
        own[name] = (took - nested[0]) * 1000
        nested[0] = outer + took
preloaded = {{m: m in sys.modules for m in {preloaded!r}}}
bootstrap._find_and_load = timed
load_plugins()
bootstrap._find_and_load = real
print("RESULT " + json.dumps({{"own": own, "preloaded": preloaded}}))
"""
#: Modules the plugin uses that sglang may already have imported when it loads plugins.
PRELOADED = ("packaging.version", "importlib.metadata")


def _install_wheel(tree: Path, dest: Path) -> list[Path]:
    """The entries ``pip install`` of ``tree``'s wheel puts into site-packages, compiled."""
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    subprocess.run([*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(dest / "dist"),
                    str(tree)], check=True, capture_output=True)
    wheel = next((dest / "dist").glob("sglang_aiter_plugin-*.whl"))
    target = dest / "site"
    subprocess.run([*pip, "install", "--no-deps", "--no-index", "--no-compile", "--target",
                    str(target), str(wheel)], check=True, capture_output=True)
    compileall.compile_dir(str(target / "sglang_aiter_plugin"), quiet=1)  # what pip does
    return [e for e in target.iterdir() if e.name != "bin"]  # the console script: not read


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Start-up cost of the plugin as on ROCm")
    parser.add_argument("--runs", type=int, default=10, help="rounds (samples per variant)")
    parser.add_argument("--baseline", type=Path,
                        help="another checkout, measured as the variant 'baseline installed'")
    parser.add_argument("--out", type=Path,
                        default=ROOT / "benchmarks/results/startup_rocm.json")
    args = parser.parse_args(argv)
    _popen_wait4()
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    samples: dict[str, dict[str, list[float]]] = {}
    last: dict[str, Any] = {}
    steps: dict[str, list[float]] = {}
    modules: dict[str, list[float]] = {}
    preloaded: dict[str, bool] = {}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        trees = {"installed": ROOT, "baseline installed": args.baseline}
        paths = {variant: _overlay(tmp / variant.replace(" ", "-"),
                                   _install_wheel(tree, tmp / f"wheel of {variant}"))
                 for variant, tree in trees.items() if tree is not None}
        paths["not installed"] = _overlay(tmp / "not-installed", [])
        envs = {variant: {**base_env, "PYTHONPATH": str(path)} for variant, path in paths.items()}
        envs[NO_COLLECTIVES] = {**envs["installed"], DISABLE_VAR: ",".join(
            name for name, _ in BUILTIN_FIXES if name.startswith("capture-"))}
        names = [(v, p) for p in PRELUDES for v in envs]
        for i in range(args.runs + 1):  # the first round warms the page cache, not recorded
            names = names[1:] + names[:1]
            for variant, pre in names:
                code = CHILD.format(pre=PRELUDES[pre], methods=METHODS,
                                    walk=variant == "installed" and pre == "launcher")
                _, _, out, _ = _run([sys.executable, "-S", "-c", code], envs[variant], tmp)
                data = json.loads(out.split("RESULT ", 1)[1])
                key = f"{variant}, {pre}"
                last[key] = data
                if i:
                    for k in ("call_ms", "cpu_ms", "ps_ms", "gc_ms"):
                        samples.setdefault(key, {}).setdefault(k, []).append(data[k])
                    for n, (walk_ms, _) in data["walk"].items():
                        samples.setdefault(key, {}).setdefault(f"walk {n}", []).append(walk_ms)
            if i:
                _, _, out, err = _run([sys.executable, "-S", "-c", STEPS], envs["installed"], tmp)
                timed = json.loads(out.split("RESULT ", 1)[1])
                if set(timed) != set(BUYS):  # register() failed, or its steps changed
                    raise RuntimeError(f"register()'s steps: {sorted(timed)}, expected "
                                       f"{sorted(BUYS)}\n{err[-2000:]}")
                for label, value in timed.items():
                    steps.setdefault(label, []).append(value)
                code = MODULES.format(preloaded=PRELOADED)
                _, _, out, _ = _run([sys.executable, "-S", "-c", code], envs["installed"], tmp)
                imported = json.loads(out.split("RESULT ", 1)[1])
                preloaded = imported["preloaded"]
                for name, own_ms in imported["own"].items():
                    modules.setdefault(name, []).append(own_ms)
            print(f"round {i}/{args.runs}", file=sys.stderr, flush=True)
    ms = {key: {k: _summary(v) for k, v in series.items()} for key, series in samples.items()}
    result: dict[str, Any] = {
        **run_facts("startup_rocm"),
        "hip": HIP,
        "ms": ms,
        "wrapped": {key: data["wrapped"] for key, data in last.items()},
        "walk_found": {n: found for n, (_, found) in last["installed, launcher"]["walk"].items()},
        "ratio": {}, "cpu_ratio": {}, "added_ms": {},
    }
    for key in samples:
        variant, _, pre = key.partition(", ")
        if variant == "not installed":
            continue
        own = samples[f"not installed, {pre}"]
        for k, figure in (("call_ms", "ratio"), ("cpu_ms", "cpu_ratio")):  # round by round
            result[figure][key] = _summary([(a - b) / b for a, b in
                                            zip(samples[key][k], own[k], strict=True)])
        result["added_ms"][key] = (ms[key]["call_ms"]["median"]
                                   - ms[f"not installed, {pre}"]["call_ms"]["median"])
    result["steps"] = {label: {"ms": _summary(v), "buys": BUYS[label]}
                       for label, v in steps.items()}
    result["modules_ms"] = {name: _summary(v) for name, v in modules.items()}
    result["preloaded"] = preloaded
    result["walk_ms_total"] = sum(v["median"] for k, v in ms["installed, launcher"].items()
                                  if k.startswith("walk "))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: {key: round(v["median"], 3) for key, v in result[k].items()}
                      for k in ("ratio", "cpu_ratio")}))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
