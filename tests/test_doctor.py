"""`sglang-aiter-plugin doctor`: table and JSON output, exit codes that mean something."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from typing import Any

import pytest
from packaging.version import Version


def doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("sglang-aiter-plugin", path=os.path.dirname(sys.executable))
    assert exe, "the console script is installed with the package"
    full = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    full.update(env or {})
    return subprocess.run([exe, "doctor", *args], capture_output=True, text=True, env=full,
                          timeout=600)


@pytest.fixture(scope="module")
def default_json() -> dict[str, Any]:
    proc = doctor("--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def test_json_reports_every_probe(default_json: dict[str, Any], sglang_version: Version) -> None:
    import torch

    from sglang_aiter_plugin.backend._availability import aiter_problem

    checks = {c["name"]: c for c in default_json["checks"]}
    assert default_json["ok"] is True
    assert checks["sglang"]["summary"] == f"sglang {sglang_version}: supported"
    assert checks["discovery"]["level"] == "ok"
    assert f"torch {torch.__version__}" in checks["platform"]["summary"]
    problem = aiter_problem()  # the truth on whatever machine runs this
    if problem is None:
        assert checks["aiter"]["level"] == "ok"
    else:
        assert checks["aiter"]["summary"] == f"aiter-ext cannot run here: {problem}"
        assert checks["aiter"]["level"] == "warn"  # nobody selected aiter-ext
    # doctor imports what sglang imports at launch, so the fix's final outcome shows
    assert checks["fix attention-backend"]["summary"].startswith("applied")
    assert "fix reduce-scatter-tms" in checks
    assert checks["switches"]["summary"].endswith("batch bounds check: off")


def test_bounds_check_is_shown_and_a_bad_value_fails() -> None:
    on = doctor("--json", env={"SGLANG_AITER_EXT_BOUNDS_CHECK": "1"})
    assert on.returncode == 0
    checks = {c["name"]: c for c in json.loads(on.stdout)["checks"]}
    assert checks["switches"]["summary"].endswith("batch bounds check: on")
    bad = doctor(env={"SGLANG_AITER_EXT_BOUNDS_CHECK": "maybe"})
    assert bad.returncode == 1
    assert "SGLANG_AITER_EXT_BOUNDS_CHECK='maybe' is not valid" in bad.stdout


def test_table_is_human_readable() -> None:
    proc = doctor()
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert any(ln.startswith("ok    discovery") for ln in lines)
    assert lines[-1] == "doctor: no problems found"


def test_selecting_aiter_ext_without_aiter_fails() -> None:
    proc = doctor("--attention-backend", "aiter-ext")
    assert proc.returncode == 1
    assert "FAIL  aiter" in proc.stdout
    assert "aiter-ext cannot run here" in proc.stdout


def test_allow_list_excluding_the_plugin_fails_with_the_way_out() -> None:
    proc = doctor("--json", env={"SGLANG_PLUGINS": "other"})
    assert proc.returncode == 1
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["discovery"]["level"] == "FAIL"
    assert "SGLANG_PLUGINS='other' leaves 'aiter_ext' out" in checks["discovery"]["summary"]


def test_bad_switch_fails() -> None:
    proc = doctor(env={"SGLANG_AITER_EXT": "perhaps"})
    assert proc.returncode == 1
    assert "SGLANG_AITER_EXT='perhaps' is not valid" in proc.stdout


def test_disabled_plugin_is_shown_as_disabled() -> None:
    proc = doctor("--json", env={"SGLANG_AITER_EXT": "0"})
    assert proc.returncode == 0
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["fix attention-backend"]["summary"] == "disabled: SGLANG_AITER_EXT=0"
