"""The canary over every supported release: each call sglang's ``GroupCoordinator`` makes on
aiter's communicator, and what the plugin knows of it.

    .venv/bin/python tests/compat/collective_calls.py --wheels DIR                # every release
    .venv/bin/python tests/compat/collective_calls.py --wheels DIR 0.5.11 0.5.23  # these releases

The canary (:mod:`sglang_aiter_plugin.fixes.collectives.calls`) reads source only, so nothing is
installed: each release's ``sglang/srt/distributed/parallel_state.py`` is read from its wheel in
DIR (``pip download --no-deps`` fetches the wheels missing there). Writes
``tests/compat/collective_calls.json`` and ``tests/compat/COLLECTIVE_CALLS.md``; the test
``tests/fixes/collectives/test_calls.py`` checks the installed release against them and that
every call it makes is known.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as ``python tests/compat/collective_calls.py``
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from sglang_aiter_plugin import _releases
from sglang_aiter_plugin.fixes.collectives import registered
from sglang_aiter_plugin.fixes.collectives.calls import communicator_calls, known_as
from tests.compat import per_release

ROOT = Path(__file__).resolve().parents[2]
OUT_JSON = ROOT / "tests" / "compat" / "collective_calls.json"
OUT_MD = ROOT / "tests" / "compat" / "COLLECTIVE_CALLS.md"
SOURCE = "sglang/srt/distributed/parallel_state.py"
UNKNOWN = "UNKNOWN: may register during capture, no fix covers it"


def rows(source: str) -> list[dict[str, Any]]:
    """One row per call on aiter's communicator in a ``parallel_state.py``, with its verdict."""
    return [{**call._asdict(), "known_as": known_as(call, registered()) or UNKNOWN}
            for call in communicator_calls(source)]


def _wheel(version: str, wheels: Path) -> Path:
    found = sorted(wheels.glob(f"sglang-{version}-*.whl"))
    if not found:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "-q",
                        "--disable-pip-version-check", "-d", str(wheels), f"sglang=={version}"],
                       check=True)
        found = sorted(wheels.glob(f"sglang-{version}-*.whl"))
    if not found:
        raise SystemExit(f"no wheel of sglang {version} in {wheels}")
    return found[0]


def measure(version: str, wheels: Path) -> dict[str, Any]:
    source = zipfile.ZipFile(_wheel(version, wheels)).read(SOURCE).decode()
    return {"release": version, "rows": rows(source)}


def _render(results: list[dict[str, Any]], command: str, date: str) -> str:
    out = [
        *per_release.generated(
            "sglang's calls on aiter's communicator, per release",
            "tests/compat/collective_calls.py", command, date),
        "Every `ca_comm.<name>(...)` in the methods of `GroupCoordinator`",
        f"(`{SOURCE}` in the release's wheel), read by the canary the plugin ships",
        "(`sglang_aiter_plugin/fixes/collectives/calls.py`, also `doctor`'s `collectives` row),",
        "and why the plugin knows each: a call that may register the caller's tensors during a",
        "CUDA-graph capture is known only where a collective fix probes its method and has the",
        "call's unregistered form (sglang's all-reduce too). `registered=`: the literal the",
        "call passes, where it passes one.",
        "",
        "## Summary",
        "",
        "| sglang | calls | unknown |",
        "| --- | --- | --- |",
    ]
    for res in results:
        unknown = [f"`{r['method']}` -> `{r['name']}` (line {r['line']})" for r in res["rows"]
                   if r["known_as"] == UNKNOWN]
        out.append(f"| {res['release']} | {len(res['rows'])} | "
                   f"{', '.join(unknown) if unknown else 'none: all known'} |")
    out.append("")
    for res in results:
        out += [f"## sglang {res['release']}", "",
                "| `GroupCoordinator` method | call | line | `registered=` | known as |",
                "| --- | --- | --- | --- | --- |"]
        for r in res["rows"]:
            given = "-" if r["registered"] is None else str(r["registered"])
            out.append(f"| `{r['method']}` | `{r['name']}` | {r['line']} | {given} | "
                       f"{r['known_as']} |")
        out.append("")
    return "\n".join(out)


def rerender() -> None:
    """Rewrite ``COLLECTIVE_CALLS.md`` from ``collective_calls.json`` (no measurement)."""
    data = json.loads(OUT_JSON.read_text())
    OUT_MD.write_text(_render(data["results"], data["command"], data["date"]) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--wheels", type=Path, required=True,
                        help="a folder of sglang wheels (missing ones are downloaded into it)")
    parser.add_argument("releases", nargs="*", default=list(_releases.TESTED))
    args = parser.parse_args(argv)
    args.wheels.mkdir(parents=True, exist_ok=True)
    command = "python tests/compat/collective_calls.py --wheels DIR " + " ".join(args.releases)
    date = dt.date.today().isoformat()
    results = [measure(version, args.wheels) for version in args.releases]
    OUT_JSON.write_text(json.dumps({"command": command, "date": date, "results": results},
                                   indent=1) + "\n")
    OUT_MD.write_text(_render(results, command, date) + "\n")
    print(f"wrote {OUT_MD.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
