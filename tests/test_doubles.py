"""Every test double is listed, with what it stands in for, in ``testkit.doubles.DOUBLES``."""

from __future__ import annotations

from pathlib import Path

from testkit.doubles import DOUBLES


def test_every_double_module_is_listed_and_every_listed_double_exists() -> None:
    folder = Path(__file__).resolve().parents[1] / "testkit" / "doubles"
    modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    assert modules == set(DOUBLES)
    for name, what in DOUBLES.items():
        assert what.strip(), name
