"""The supported releases are written once (``_releases.py``); what cannot read it must agree."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

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
