"""Formatting shared by the RESULTS.md sections."""

from __future__ import annotations

from typing import Any

__all__ = ["fmt", "header"]


def header(data: dict[str, Any]) -> list[str]:
    keys = ("command", "date", "machine", "python", "torch", "triton", "sglang", "gpu")
    lines = [f"- {k}: `{data[k]}`" for k in keys if data.get(k)]
    return [*lines, ""]


def fmt(s: dict[str, float], unit: str, digits: int = 1) -> str:
    return (f"{s['median']:.{digits}f} {unit} (IQR {s['q1']:.{digits}f} to {s['q3']:.{digits}f}, "
            f"n={int(s['n'])})")
