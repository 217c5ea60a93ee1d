"""Command line: ``sglang-aiter-plugin doctor [--json] [--attention-backend NAME]``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from sglang_aiter_plugin._version import __version__

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="sglang-aiter-plugin",
        description="sglang-aiter-plugin: the aiter-ext attention backend for sglang on ROCm",
    )
    parser.add_argument("--version", action="version", version=__version__)
    sub = parser.add_subparsers(dest="command", required=True)
    doctor = sub.add_parser("doctor", help="check sglang, the platform, discovery and each fix")
    doctor.add_argument("--json", action="store_true", help="machine-readable output")
    doctor.add_argument(
        "--attention-backend",
        metavar="NAME",
        help="the backend you will launch with; with aiter-ext, a missing aiter is an error",
    )
    args = parser.parse_args(argv)

    from sglang_aiter_plugin import _doctor

    report = _doctor.collect(selected_backend=args.attention_backend)
    out = _doctor.render_json(report) if args.json else _doctor.render_table(report)
    print(out)
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
