"""Wall time of ``sglang-aiter-plugin selftest`` against one sglang import, on the GPU machine.

Measures, side by side in one run (alternating, ``--runs`` rounds):

* the wall time of one fresh process that runs sglang's plugin loader and imports sglang's aiter
  backend module (``import sglang.srt.layers.attention.aiter_backend``): what every self-test
  worker pays once before its first case;
* the wall time of ``python -m sglang_aiter_plugin selftest`` with its default options (``--json``
  only, to read the outcome), from start to exit;

and reports their ratio (the goal: at most 2.5). Both processes get the kernel doubles as
``gpu/run_selftest_evidence.sh`` installs them: through sglang's own plugin loader
(``testkit/doubles/server_plugin.py``, ``SGLANG_E2E_DOUBLES=aiter,unified,capture-safe,
rocm-host,mla``; aiter's Triton tree and its ``aiter/mla.py`` from ``SGLANG_E2E_AITER_TREE`` and
``SGLANG_E2E_AITER_MLA_TREE``, default ``.gpu-carry/aiter-git``). ``SGLANG_SITE`` (default
``/tmp/site``) is the folder that holds sglang
and this plugin's wheel, as ``gpu/run_server_evidence.sh`` installs them.

    python3 -m benchmarks.selftest_wall --runs 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._format import run_facts

ROOT = Path(__file__).resolve().parents[1]
IMPORT = ("from sglang.srt.plugins import load_plugins; load_plugins(); "
          "import sglang.srt.layers.attention.aiter_backend")
GOAL = 2.5
"""The self-test's wall time, in fresh-process imports of sglang's aiter backend module."""


def _environment(site: Path) -> dict[str, str]:
    """The environment of gpu/run_selftest_evidence.sh: the doubles' plugin first on the path."""
    from testkit.doubles.server_plugin import (
        AITER_MLA_TREE_VAR,
        AITER_TREE_VAR,
        DOUBLES_VAR,
        site_dir,
    )

    site_dir(site, gpu=True)
    sglang_site = os.environ.get("SGLANG_SITE", "/tmp/site")
    paths = [str(site), sglang_site, str(ROOT), str(ROOT / "gpu" / "wheelhouse")]
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(paths),
        "PYTHONUNBUFFERED": "1",
        DOUBLES_VAR: "aiter,unified,capture-safe,rocm-host,mla",
        AITER_TREE_VAR: os.environ.get(AITER_TREE_VAR, str(ROOT / ".gpu-carry" / "aiter-git")),
        AITER_MLA_TREE_VAR: os.environ.get(AITER_MLA_TREE_VAR,
                                           str(ROOT / ".gpu-carry" / "aiter-git")),
        "TRITON_CACHE_DIR": os.environ.get("TRITON_CACHE_DIR", "/tmp/triton-cache-selftest"),
    }


def _timed(args: list[str], env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess[str]]:
    start = time.perf_counter()
    done = subprocess.run(args, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    return time.perf_counter() - start, done


def _summary(values: list[float]) -> dict[str, float]:
    q = statistics.quantiles(values, n=4) if len(values) >= 4 else [min(values), 0, max(values)]
    return {"median": statistics.median(values), "q1": q[0], "q3": q[-1],
            "min": min(values), "max": max(values), "n": len(values)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(
        "selftest wall time (default options) against one fresh-process import of sglang's "
        "aiter backend module, on the GPU"))
    parser.add_argument("--runs", type=int, default=2, help="rounds (one import, one selftest)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/selftest_wall.json")
    args = parser.parse_args(argv)
    imports: list[float] = []
    selftests: list[float] = []
    outcomes: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        env = _environment(Path(tmp) / "site")
        for i in range(args.runs):
            seconds, done = _timed([sys.executable, "-c", IMPORT], env)
            if done.returncode != 0:
                raise RuntimeError(f"the import failed:\n{done.stderr[-3000:]}")
            imports.append(seconds)
            seconds, done = _timed([sys.executable, "-m", "sglang_aiter_plugin", "selftest",
                                    "--json"], env)
            report = json.loads(done.stdout) if done.stdout.strip() else {}
            if not report:
                raise RuntimeError(f"the self-test printed no report:\n{done.stderr[-3000:]}")
            selftests.append(seconds)
            outcomes.append({"exit_status": done.returncode, "summary": report.get("summary"),
                             "problem": report.get("problem"),
                             "cases": {c["case"]: {k: (c[k] or {}).get("outcome")
                                                   for k in ("upstream", "aiter-ext")}
                                       for c in report.get("cases", [])}})
            print(f"round {i + 1}/{args.runs}: import {imports[-1]:.1f} s, selftest "
                  f"{selftests[-1]:.1f} s (exit status {done.returncode})", file=sys.stderr,
                  flush=True)
    gpu = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, check=False)
    ratios = [s / i for s, i in zip(selftests, imports, strict=True)]
    result: dict[str, Any] = {
        **run_facts("selftest_wall"),
        "gpu": gpu.stdout.strip() or None,
        "import_s": _summary(imports),
        "selftest_s": _summary(selftests),
        "ratio_per_round": ratios,
        "ratio": statistics.median(selftests) / statistics.median(imports),
        "goal": GOAL,
        "runs": outcomes,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: result[k] for k in ("import_s", "selftest_s", "ratio", "goal")}))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
