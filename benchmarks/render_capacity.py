"""RESULTS.md section for ``benchmarks/pool_capacity.py``: the pool's bytes against upstream's."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from benchmarks._format import header

__all__ = ["pool_capacity"]


def _kib(n: int) -> str:
    return f"{n:,} B ({n / 1024:.1f} KiB)"


def pool_capacity(data: dict[str, Any], _: Path) -> list[str]:
    lines = ["## Per-batch buffer memory at the new capacity (CPU, sizes)", "", *header(data),
             f"- Model: {data['model']}.",
             "- `capacity`: the rows `aiter-ext` sizes its pool for at construction (the largest "
             "batch sglang can send on any path); `P`: the request pool upstream sizes for. "
             "Bytes are the sum over the per-batch buffers listed, per backend instance.", "",
             "| configuration | decode path | P | capacity | upstream bytes | aiter-ext bytes "
             "| extra (graphs off) | extra (after graph set-up) |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in data["rows"]:
        lines.append(
            f"| {r['configuration']} | {r['path']} | {r['pool']} | {r['capacity']} | "
            f"{r['upstream_bytes_no_graphs']:,} | {r['aiter_ext_bytes_no_graphs']:,} | "
            f"**{_kib(r['extra_bytes_no_graphs'])}** | {_kib(r['extra_bytes_graphs'])} |")
    lines += ["", "The capacity is computed once per backend, at construction; the per-step "
              "methods stay upstream's own (`tests/backend/test_backend_hooks.py`). The "
              "per-step GPU benchmark above was not re-run for this change.", ""]
    return lines
