"""Command line: ``sglang-aiter-plugin doctor [--json] [--attention-backend NAME]``."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    try:
        from sglang_aiter_plugin._releases import __version__ as version
    except Exception as exc:  # a broken install: doctor says more
        version = f"unknown ({type(exc).__name__})"
    parser = argparse.ArgumentParser(prog="sglang-aiter-plugin", description=(
        "sglang-aiter-plugin: the aiter-ext attention backend for sglang on ROCm"))
    parser.add_argument("--version", action="version", version=version)
    sub = parser.add_subparsers(dest="command", required=True)
    doctor = sub.add_parser("doctor", help="check sglang, the platform, discovery and each fix")
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.add_argument("--attention-backend", metavar="NAME", help=(
        "the backend you will launch with; with aiter-ext, a missing aiter is an error"))
    args = parser.parse_args(argv)

    try:
        from sglang_aiter_plugin import _doctor
    except Exception as exc:  # the one check left: the doctor itself does not import
        summary = f"sglang_aiter_plugin._doctor does not import: {type(exc).__name__}: {exc}"
        check = {"name": "doctor", "level": "FAIL", "summary": summary}
        print(json.dumps({"ok": False, "checks": [check]}, indent=2) if args.json
              else f"FAIL  doctor  {summary}\n\ndoctor: problems found")
        return 1
    report = _doctor.collect(selected_backend=args.attention_backend)
    print(_doctor.render_json(report) if args.json else _doctor.render_table(report))
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
