"""`sglang-aiter-plugin doctor`: table and JSON output, exit codes that mean something."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest


def doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("sglang-aiter-plugin", path=os.path.dirname(sys.executable))
    assert exe, "the console script is installed with the package"
    full = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    full.update(env or {})
    return subprocess.run([exe, "doctor", *args], capture_output=True, text=True, env=full,
                          timeout=600)


@pytest.fixture(scope="module")
def default_json() -> dict:  # type: ignore[type-arg]
    proc = doctor("--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout)


def test_json_reports_every_probe(default_json, sglang_version) -> None:  # type: ignore[no-untyped-def]
    checks = {c["name"]: c for c in default_json["checks"]}
    assert default_json["ok"] is True
    assert checks["sglang"]["summary"] == f"sglang {sglang_version}: supported"
    assert checks["discovery"]["level"] == "ok"
    assert "not a ROCm build" in checks["aiter"]["summary"]  # the truth on this machine
    assert checks["aiter"]["level"] == "warn"  # nobody selected aiter-ext
    assert checks["fix attention-backend"]["summary"].startswith("applied")
    for fix in ("capture-all-reduce", "capture-all-gather", "capture-reduce-scatter",
                "capture-fused-ar-rmsnorm"):  # off ROCm: installs nothing, and says so
        assert checks[f"fix {fix}"]["summary"].startswith("skipped: not a ROCm (HIP) platform")
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
    assert "FAIL  aiter" in proc.stdout and "aiter-ext cannot run here" in proc.stdout


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
