"""Compatibility matrix: run the CPU suite against every supported sglang release.

    .venv/bin/python -m tests.compat.matrix                 # every release in _releases.TESTED
    .venv/bin/python -m tests.compat.matrix 0.5.15 0.5.23   # a subset

Each release is installed once beside the base environment (``tools/with-sglang``), the suite runs
with a JUnit report, and the results are folded into ``tests/compat/MATRIX.md`` (release x area ->
pass / fail / n/a) plus ``tests/compat/matrix.json``. The README's support statement is rewritten
from the table. Releases newer than the newest supported one that PyPI offers are listed as
"untested".
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from packaging.version import Version

from sglang_aiter_plugin import _releases
from tests.compat.collectives import COLUMNS, collective_verdicts

ROOT = Path(__file__).resolve().parents[2]
OUT_DIR = ROOT / "tests" / "compat"
SUPPORTED = list(_releases.TESTED)

#: Matrix column -> test paths (prefixes of pytest node ids) that make it up.
AREAS: dict[str, tuple[str, ...]] = {
    "discovery": ("tests/test_discovery.py", "tests/test_registration.py", "tests/plugin/",
                  "tests/test_install.py", "tests/test_footprint.py", "tests/test_status.py",
                  "tests/test_patch.py", "tests/test_status_kept.py"),
    "CLI": ("tests/test_launch.py", "tests/test_doctor.py", "tests/test_switches.py",
            "tests/test_sglang.py", "tests/test_releases.py", "tests/test_docs.py",
            "tests/test_architecture.py",
            "tests/test_errors.py", "tests/test_raises.py"),
    "attention backend": ("tests/fixes/attention_backend/", "tests/test_rebind.py",
                          "tests/test_ledger.py"),
    "buffer pool": ("tests/backend/",),
    "collectives": ("tests/fixes/collectives/", "tests/test_other_plugins.py"),
    "selftest": ("tests/selftest/",),
    "faults": ("tests/test_faults", "tests/test_doubles.py", "tests/test_benchmarks.py"),
    "e2e": ("tests/e2e/",),
}
E2E = "e2e"
"""A real ``launch_server`` tree on CPU; where a release cannot serve, its cell says why."""
CELLS = ("release", *AREAS, *COLUMNS.values(), "suite", "minutes", "commit")
"""A row's cells, in MATRIX.md's order; matrix.json holds no other."""


def _run_release(version: str, junit: Path, tests: list[str]) -> tuple[int, float]:
    start = time.monotonic()
    cmd = ["bash", str(ROOT / "tools" / "with-sglang"), version, sys.executable, "-m", "pytest",
           "-q", "-p", "no:cacheprovider", f"--junitxml={junit}", *tests]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    tail = "\n".join(proc.stdout.splitlines()[-3:])
    print(f"  sglang {version}: exit {proc.returncode}; {tail.strip()}", flush=True)
    return proc.returncode, time.monotonic() - start


def _cases(junit: Path) -> list[tuple[str, str]]:
    """(test path, outcome) for each test case in a JUnit report."""
    cases = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        path = case.get("classname", "").replace(".", "/")
        outcome = "passed"
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
            elif child.tag == "skipped":
                outcome = "xfailed" if child.get("type") == "pytest.xfail" else "skipped"
        cases.append((path, outcome))
    return cases


def _cell(cases: list[tuple[str, str]], prefixes: tuple[str, ...]) -> str:
    mine = [o for p, o in cases if any((p + ".py").startswith(x) or p.startswith(x.rstrip("/"))
                                         for x in prefixes)]
    if not mine:
        return "no tests"
    if "failed" in mine:
        return f"FAIL ({mine.count('failed')})"
    ran = [o for o in mine if o in ("passed", "xfailed")]
    if not ran:
        return "n/a (skipped)"
    return f"pass ({len(ran)})"


def _skip_reason(junit: Path, prefixes: tuple[str, ...]) -> str:
    """Each distinct skip message of the area's tests, once, in the order met (the GPU tier's
    and the CPU tier's alike), without pytest's location prefix."""
    reasons: dict[str, None] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        path = case.get("classname", "").replace(".", "/")
        skipped = case.find("skipped")
        if skipped is not None and any(path.startswith(x.rstrip("/")) for x in prefixes):
            message = skipped.get("message", "skipped")
            reasons[message.split("Skipped: ", 1)[-1].replace("|", "/")] = None
    return "; ".join(reasons) or "skipped"


def _commit() -> str:
    proc = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                          text=True)
    return proc.stdout.strip() or "?"


def _newer_on_pypi() -> list[str]:
    proc = subprocess.run([sys.executable, "-m", "pip", "index", "versions", "sglang"],
                          capture_output=True, text=True)
    match = re.search(r"Available versions: (.*)", proc.stdout)
    if not match:
        return []
    newest = Version(SUPPORTED[-1])
    found = {Version(v.strip()) for v in match.group(1).split(",") if v.strip()}
    return [str(v) for v in sorted(found) if v > newest and not v.is_prerelease]


def _command(entry: str) -> str:
    """A command as MATRIX.md names it: ``COMMAND | NOTE`` (what it ran, when) or the command."""
    command, _, note = entry.partition(" | ")
    return f"`{command}`" + (f" ({note})" if note else "")


def _write(rows: list[dict[str, str]], newer: list[str], commands: list[str]) -> None:
    lines = [
        "# Compatibility matrix",
        "",
        f"Generated {dt.date.today().isoformat()} on a CPU machine (Python "
        f"{sys.version.split()[0]}), each release installed from PyPI with `--no-deps`, by "
        + "; then ".join(_command(c) for c in commands) + ". Each row names the commit it ran.",
        "`pass (n)`: n tests ran and passed (expected failures that document upstream gaps count",
        "as run); `n/a (skipped)`: every test of the area skipped because the release lacks the",
        "path (e.g. no `_maybe_aiter_reduce_scatter` before 0.5.15). Verdict columns: what a",
        "ROCm process with that release reports for each collective (`applied (...)`: the",
        "switches the plugin adds there; `skipped`: no AITER path for that collective).",
        "`e2e`: a real `launch_server` process tree serving a tiny checkpoint on CPU through",
        "`aiter-ext` (tests/e2e); where a release cannot serve on CPU the cell says why.",
        "",
        "| " + " | ".join(CELLS) + " |",
        "| " + " | ".join("---" for _ in CELLS) + " |",
    ]
    lines += ["| " + " | ".join(row.get(c, "-") for c in CELLS) + " |" for row in rows]
    if newer:
        lines += ["", "Newer releases on PyPI, **untested** (`doctor` warns on them): "
                  + ", ".join(newer)]
    (OUT_DIR / "MATRIX.md").write_text("\n".join(lines) + "\n")
    (OUT_DIR / "matrix.json").write_text(
        json.dumps({"rows": rows, "untested": newer, "commands": commands}, indent=2)
    )
    _write_support_statement(rows, newer)


def _write_support_statement(rows: list[dict[str, str]], newer: list[str]) -> None:
    readme = ROOT / "README.md"
    text = readme.read_text()
    start, end = "<!-- support:start -->", "<!-- support:end -->"
    if start not in text or end not in text:
        return
    ok = [r["release"] for r in rows if r["suite"] == "pass"]
    bad = [r["release"] for r in rows if r["suite"] != "pass"]
    body = (f"Supported and tested: sglang {', '.join(ok) or 'none'}"
            + (f"; failing: {', '.join(bad)}" if bad else "")
            + (f". Untested newer releases: {', '.join(newer)}" if newer else "")
            + ". Details per area: [tests/compat/MATRIX.md](tests/compat/MATRIX.md).")
    before, rest = text.split(start, 1)
    _, after = rest.split(end, 1)
    readme.write_text(f"{before}{start}\n{body}\n{end}{after}")


def _test_release(version: str, reports: Path, tests: list[str],
                  previous: dict[str, dict[str, str]]) -> dict[str, str]:
    print(f"sglang {version}", flush=True)
    junit = reports / f"{version}.xml"
    junit.unlink(missing_ok=True)
    code, seconds = _run_release(version, junit, tests)
    cases = _cases(junit) if junit.exists() else []
    whole = tests == ["tests"]
    # a whole run writes the row anew (no cell from an earlier run, or a retired area, survives);
    # a partial refresh keeps the cells of the areas it does not run
    row = {"release": version} if whole else dict(previous.get(version, {"release": version}))
    for area, prefixes in AREAS.items():
        cell = _cell(cases, prefixes)
        if area == E2E and cell == "n/a (skipped)" and junit.exists():
            cell = f"n/a ({_skip_reason(junit, prefixes)})"
        if cell != "no tests" or whole or area not in row:
            row[area] = cell
    row.update(collective_verdicts(version))
    row["suite"] = "pass" if all(not str(row[a]).startswith("FAIL") for a in AREAS) and (
        code == 0 or not whole) else "FAIL"
    row["minutes"] = f"{seconds / 60:.1f}" if whole else row.get("minutes", "-")
    row["commit"] = _commit()
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("releases", nargs="*", default=SUPPORTED)
    parser.add_argument("--jobs", type=int, default=1, help="releases tested at the same time")
    parser.add_argument("--tests", nargs="+", default=["tests"], metavar="PATH",
                        help="run only these test paths; only the areas they cover are updated")
    args = parser.parse_args(argv)
    command = "python -m tests.compat.matrix" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    previous: dict[str, dict[str, str]] = {}
    commands = [command]
    if (OUT_DIR / "matrix.json").exists():
        saved = json.loads((OUT_DIR / "matrix.json").read_text())
        previous = {r["release"]: r for r in saved["rows"]}
        if args.releases != SUPPORTED or args.tests != ["tests"]:  # a partial refresh
            commands = [*saved.get("commands", []), command]
    newer = _newer_on_pypi()
    reports = ROOT / ".sglang-releases" / "junit"
    reports.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        for row in pool.map(lambda v: _test_release(v, reports, args.tests, previous),
                            args.releases):
            previous[row["release"]] = row
            rows = [previous[v] for v in sorted(previous, key=Version)]
            _write(rows, newer, commands)  # after each release: an interrupted run keeps some
    print(f"wrote {OUT_DIR / 'MATRIX.md'}")
    return 0 if all(r["suite"] == "pass" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
