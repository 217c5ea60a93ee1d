"""What the compatibility measurements share: run a measurement in one release's interpreter,
and the command line that runs it for each release and writes its JSON and Markdown."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["ROOT", "main", "release_tables", "run_release"]

ROOT = Path(__file__).resolve().parents[2]


def run_release(version: str, code: str, unset: Iterable[str]) -> dict[str, Any]:
    """``code`` (it prints ``RESULT <json rows>``) against sglang ``version`` (Triton's
    interpreter, without the variables in ``unset``); its rows, or ``SystemExit`` with its
    stderr."""
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(ROOT)}
    for name in unset:
        env.pop(name, None)
    proc = subprocess.run(
        ["bash", str(ROOT / "tools" / "with-sglang"), version, sys.executable, "-c", code],
        cwd=ROOT, capture_output=True, text=True, env=env,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise SystemExit(f"sglang {version}: exit {proc.returncode}\n{proc.stderr[-4000:]}")
    return {"release": version, "rows": json.loads(lines[-1][len("RESULT "):])}


def main(argv: list[str] | None, *, doc: str, script: str, default: list[str],
         measure: Callable[[str], dict[str, Any]],
         render: Callable[[list[dict[str, Any]], str, str], str],
         out_json: Path, out_md: Path) -> int:
    """``python SCRIPT [RELEASE...]``: ``measure`` each release, write ``out_json`` and
    ``render(results, command, date)`` into ``out_md``."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("releases", nargs="*", default=default)
    args = parser.parse_args(argv)
    command = f"python {script} " + " ".join(args.releases)
    date = dt.date.today().isoformat()
    results = []
    for version in args.releases:
        print(f"sglang {version} ...", flush=True)
        results.append(measure(version))
    out_json.write_text(json.dumps({"command": command, "date": date, "results": results},
                                   indent=1) + "\n")
    out_md.write_text(render(results, command, date) + "\n")
    print(f"wrote {out_md.relative_to(ROOT)}")
    return 0


def release_tables(results: list[dict[str, Any]], columns: Sequence[str],
                   cells: Callable[[dict[str, Any]], Sequence[Any]]) -> list[str]:
    """A Markdown table a release: ``columns`` as its header, ``cells(row)`` for each of the
    release's rows (``None`` shows as ``-``)."""
    out: list[str] = []
    for res in results:
        out += [f"## sglang {res['release']}", "", "| " + " | ".join(columns) + " |",
                "| " + " | ".join("---" for _ in columns) + " |"]
        out += ["| " + " | ".join("-" if c is None else str(c).replace("|", "/")
                                  for c in cells(r)) + " |" for r in res["rows"]]
        out.append("")
    return out
