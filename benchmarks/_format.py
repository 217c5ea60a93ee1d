"""Formatting shared by the RESULTS.md sections."""

from __future__ import annotations

from typing import Any

__all__ = ["fmt", "header", "run_facts"]


def header(data: dict[str, Any]) -> list[str]:
    keys = ("command", "date", "machine", "python", "torch", "triton", "sglang", "gpu")
    lines = [f"- {k}: `{data[k]}`" for k in keys if data.get(k)]
    return [*lines, ""]


def fmt(s: dict[str, float], unit: str, digits: int = 1) -> str:
    return (f"{s['median']:.{digits}f} {unit} (IQR {s['q1']:.{digits}f} to {s['q3']:.{digits}f}, "
            f"n={int(s['n'])})")


def run_facts(benchmark: str) -> dict[str, Any]:
    """What every result file records first: the benchmark, its command, date and machine."""
    import os
    import platform
    import sys
    import time
    from importlib.metadata import version
    from pathlib import Path

    import torch

    return {
        "benchmark": benchmark,
        # the command as typed (`python -m benchmarks.x ...`), not the module's file path
        "command": " ".join([Path(sys.orig_argv[0]).name, *sys.orig_argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": f"{platform.machine()} {os.cpu_count()} CPUs, {platform.platform()}",
        "python": platform.python_version(),
        "torch": torch.__version__,
        "sglang": version("sglang"),
    }
