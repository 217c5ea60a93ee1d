"""Installed-style distributions (a ``.dist-info`` folder plus modules) written for a test.

Python's ``importlib.metadata`` finds them like any installed package once their folder is on
``sys.path`` (or ``PYTHONPATH`` of a child process), entry points included.
"""

from __future__ import annotations

import textwrap
from collections.abc import Mapping
from pathlib import Path

__all__ = ["write_distribution"]


def write_distribution(
    root: Path,
    name: str,
    *,
    modules: Mapping[str, str],
    entry_points: Mapping[str, Mapping[str, str]],
) -> Path:
    """Write distribution ``name`` 1.0 into ``root``: ``modules`` (name -> source) and its
    ``entry_points`` (group -> entry-point name -> value). Returns ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    for module, source in modules.items():
        (root / f"{module}.py").write_text(textwrap.dedent(source))
    info = root / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    lines = []
    for group, eps in entry_points.items():
        lines.append(f"[{group}]")
        lines += [f"{ep} = {value}" for ep, value in eps.items()]
        lines.append("")
    (info / "entry_points.txt").write_text("\n".join(lines))
    return root
