"""The supported releases are written once (``_releases.py``); what cannot read it must agree."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

from packaging.requirements import Requirement
from packaging.version import Version

from sglang_aiter_plugin import _releases

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the tests run on 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]


def _sglang_requirement() -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (req,) = [Requirement(r) for r in project["dependencies"] if Requirement(r).name == "sglang"]
    return req


def test_pyproject_requirement_is_the_supported_range() -> None:
    spec = _sglang_requirement().specifier
    assert str(spec) == f"<{_releases.SUPPORTED_BELOW},>={_releases.OLDEST_SUPPORTED}"


def test_every_tested_release_satisfies_the_requirement() -> None:
    spec = _sglang_requirement().specifier
    outside = [v for v in _releases.TESTED if Version(v) not in spec]
    assert outside == []


def test_tested_releases_are_ordered_and_span_the_supported_range() -> None:
    versions = [Version(v) for v in _releases.TESTED]
    assert versions == sorted(versions)
    assert versions[0] == Version(_releases.OLDEST_SUPPORTED)
    assert set(_releases.CI) <= set(_releases.TESTED)
    assert _releases.BASE in _releases.CI


def test_the_set_up_scripts_read_the_same_source() -> None:
    def ask(what: str) -> str:
        out = subprocess.run([sys.executable, str(ROOT / "tools" / "sglang-releases"), what],
                             capture_output=True, text=True, check=True)
        return out.stdout.strip()

    assert ask("base") == _releases.BASE
    assert ask("ci").split() == list(_releases.CI)
    assert ask("tested").split() == list(_releases.TESTED)


def test_the_package_description_names_the_supported_range() -> None:
    """``PYPI.md`` (the package's long description) cannot read ``_releases``."""
    text = (ROOT / "PYPI.md").read_text()
    assert f"{_releases.OLDEST_SUPPORTED}\u2013{_releases.NEWEST_TESTED}" in text
    assert len(re.findall(r"0\.\d+\.\d+", text)) == 2  # no other release written out


def test_the_readme_support_statement_is_what_the_matrix_recorded() -> None:
    """The README's list is written by the compatibility matrix from its passing rows."""
    import json

    rows = json.loads((ROOT / "tests/compat/matrix.json").read_text())["rows"]
    passing = [r["release"] for r in rows if r["suite"] == "pass"]
    text = (ROOT / "README.md").read_text()
    block = text.split("<!-- support:start -->", 1)[1].split("<!-- support:end -->", 1)[0]
    listed = block.split("Supported and tested: sglang ", 1)[1]
    listed = listed.split(". Details", 1)[0].split(". Untested", 1)[0].split("; failing", 1)[0]
    assert listed.split(", ") == passing
    assert set(passing) <= set(_releases.TESTED)


def _matrix() -> Any:
    import importlib.util

    spec = importlib.util.spec_from_file_location("matrix", ROOT / "tests/compat/matrix.py")
    assert spec is not None
    assert spec.loader is not None
    matrix = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(matrix)
    return matrix


def test_the_recorded_matrix_holds_only_the_cells_its_last_runs_wrote() -> None:
    """No cell of a retired area (or from an older run) outlives a whole run of its release."""
    import json

    cells = set(_matrix().CELLS)
    rows = json.loads((ROOT / "tests/compat/matrix.json").read_text())["rows"]
    assert {r["release"]: sorted(set(r) - cells) for r in rows if set(r) - cells} == {}


def test_every_test_file_is_in_a_matrix_area() -> None:
    matrix = _matrix()
    prefixes = [p for paths in matrix.AREAS.values() for p in paths]
    files = [p.relative_to(ROOT).as_posix() for p in (ROOT / "tests").rglob("test_*.py")]
    outside = [f for f in files if not any(f.startswith(p) for p in prefixes)]
    assert outside == []
