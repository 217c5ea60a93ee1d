"""`sglang-aiter-plugin doctor`: table and JSON output, exit codes that mean something.

Each doctor run costs seconds (its discovery check starts a fresh interpreter), so one run checks
every row it can; what needs no run (the selection rules, the table layout) is checked in this
process. The default run goes through the console script, the others through its ``main``.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from sglang_aiter_plugin import _doctor, _releases
from sglang_aiter_plugin.fixes import BUILTIN_FIXES, name_of
from testkit.subproc import Result, run_python

ROOT = Path(__file__).resolve().parents[1]
BACKEND = name_of(_doctor.BACKEND_FIX)  # the attention-backend fix, as the registry names it


DOCTOR = """
import os
for name in [n for n in os.environ if n.startswith("SGLANG_") and n not in {given!r}]:
    del os.environ[name]
from sglang_aiter_plugin.cli import main
sys.exit(main({args!r}))
"""


def doctor(*args: str, env: dict[str, str] | None = None) -> Result:
    """``sglang-aiter-plugin doctor ARGS`` in a child with no sglang settings but ``env``'s:
    the console script's own ``main`` (the default run below goes through the script itself)."""
    return run_python(DOCTOR.format(given=sorted(env or {}), args=["doctor", *args]), env)


def console_script(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("sglang-aiter-plugin", path=os.path.dirname(sys.executable))
    assert exe, "the console script is installed with the package"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    return subprocess.run([exe, "doctor", *args], capture_output=True, text=True, env=env,
                          timeout=600)


@pytest.fixture(scope="module")
def default_json() -> dict[str, Any]:
    proc = console_script("--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


@pytest.mark.slow
def test_json_reports_every_probe(default_json: dict[str, Any], sglang_version: Version) -> None:
    import torch

    from sglang_aiter_plugin.backend import aiter_problem

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
    assert checks[f"fix {BACKEND}"]["summary"].startswith("applied")
    fixes = [name for name, _ in BUILTIN_FIXES if name != BACKEND]  # the collective ones
    for fix in fixes:  # off ROCm: installs nothing, and says so
        assert checks[f"fix {fix}"]["summary"].startswith("skipped: not a ROCm (HIP) platform")
    assert [n for n in checks if n.startswith("fix ")] == [  # only the fixes that can act
        f"fix {BACKEND}", *(f"fix {fix}" for fix in fixes)]
    assert checks["switches"]["summary"].endswith("batch bounds check: off")
    assert checks["collectives"]["level"] == "ok"  # the canary: every call known
    # sglang's loader ran in the fresh interpreter: no other plugin wraps what the plugin wraps
    assert checks["other plugins"]["level"] == "ok"
    assert checks["other plugins"]["summary"].startswith(
        "no other plugin of sglang.srt.plugins wraps what the plugin wraps (")
    assert checks["package"]["summary"] == (
        f"all {len(_doctor.MODULES)} modules import, from {ROOT / 'sglang_aiter_plugin'}")
    # which of upstream's defects this release has: the graph-buffer width ones only before 0.5.13
    named = [n.removeprefix("graph set-up ") for n in checks if n.startswith("graph set-up ")]
    assert "unified-page-table" in named
    assert all(checks[f"graph set-up {n}"]["summary"].endswith(  # what a launch will log
        "aiter-ext answers it, and a launch's graph set-up logs what it did")
        for n in named if n != "mla-split-table")
    assert "mla-split-table" in named  # decided by the installed aiter: see the test below
    assert ("kv-indices-per-page" in named) == (sglang_version < Version("0.5.13"))


@pytest.mark.parametrize(("release", "width"), [
    ("0.5.11", True), ("0.5.12.post1", True), ("0.5.12.post1+rocm", True), ("0.5.13", False),
    ("0.5.23", False)])
def test_upstream_defects_per_release_follow_the_ledger_ranges(release: str, width: bool) -> None:
    from sglang_aiter_plugin.backend.defects import defects_on

    names = {d.name for d in defects_on(Version(release))}
    assert ("kv-indices-per-page" in names) == width
    assert ("verify-draft-slack" in names) == width
    assert ("prefill-updater" in names) == (Version(release) < Version("0.5.23"))
    assert {"rows", "unified-page-table", "verify-custom-mask"} <= names


def _checks(proc: Result) -> dict[str, dict[str, str]]:
    return {c["name"]: c for c in json.loads(proc.stdout)["checks"]}


@pytest.mark.slow
def test_the_table_lists_every_row_and_the_verdict(default_json: dict[str, Any]) -> None:
    from sglang_aiter_plugin import _doctor

    report = _doctor.Report([_doctor.Check(**c) for c in default_json["checks"]])
    lines = _doctor.render_table(report).splitlines()
    assert any(ln.startswith("ok    discovery  ") for ln in lines)
    assert lines[-2:] == ["", "doctor: no problems found"]
    report.add("x", "FAIL", "y")
    assert _doctor.render_table(report).endswith("\ndoctor: problems found")


@pytest.mark.slow
def test_sglangs_own_backend_is_left_alone_and_the_bounds_check_is_shown() -> None:
    proc = doctor("--json", "--attention-backend", "triton",
                  env={"SGLANG_AITER_EXT_BOUNDS_CHECK": "1"})
    assert proc.returncode == 0, proc.stdout
    checks = _checks(proc)
    assert "leaves it as upstream ships it" in checks["selection"]["summary"]
    assert checks["switches"]["summary"].endswith("batch bounds check: on")


@pytest.mark.slow
def test_every_bad_switch_value_is_a_failing_row() -> None:
    names = ",".join(f"nope{i}" for i in range(5000))
    proc = doctor(env={"SGLANG_AITER_EXT": "perhaps", "SGLANG_AITER_EXT_BOUNDS_CHECK": "maybe",
                       "SGLANG_AITER_EXT_DISABLE": names})
    assert proc.returncode == 1
    rows = [ln for ln in proc.stdout.splitlines() if ln.startswith("FAIL  switches")]
    assert len(rows) == 3, rows
    assert "SGLANG_AITER_EXT='perhaps' is not valid" in rows[0]
    assert "SGLANG_AITER_EXT_BOUNDS_CHECK='maybe' is not valid" in rows[1]
    assert "5,000 unknown fixes: 'nope0', 'nope1', 'nope2', 'nope3', 'nope4' and 4,995 more" in (
        rows[2])


@pytest.mark.slow
def test_bad_switch_values_fail_while_the_plugin_is_off() -> None:
    proc = doctor("--json", "--attention-backend", "aiter-ext",
                  env={"SGLANG_AITER_EXT": "0", "SGLANG_AITER_EXT_BOUNDS_CHECK": "maybe",
                       "SGLANG_AITER_EXT_DISABLE": "foo"})
    assert proc.returncode == 1
    checks = json.loads(proc.stdout)["checks"]
    switches = [c for c in checks if c["name"] == "switches"]
    assert [c["level"] for c in switches] == ["FAIL", "FAIL"]
    assert "SGLANG_AITER_EXT_BOUNDS_CHECK='maybe' is not valid" in switches[0]["summary"]
    assert "SGLANG_AITER_EXT_DISABLE names unknown fix 'foo'" in switches[1]["summary"]
    by_name = {c["name"]: c for c in checks}
    assert by_name[f"fix {BACKEND}"]["summary"] == "disabled: SGLANG_AITER_EXT=0"
    selection = by_name["selection"]
    assert selection["level"] == "FAIL"
    assert "the plugin is switched off (SGLANG_AITER_EXT=0)" in selection["summary"]
    assert "invalid choice" in selection["summary"]


@pytest.mark.slow
def test_selecting_aiter_ext_without_aiter_fails_and_says_so_once() -> None:
    proc = doctor("--json", "--attention-backend", "aiter-ext")
    assert proc.returncode == 1
    checks = _checks(proc)
    assert checks["aiter"]["level"] == "FAIL"
    assert checks["aiter"]["summary"].startswith("aiter-ext cannot run here: ")
    # sglang accepts the name, the launch stops: never `ok ... can be selected` beside it
    assert checks["selection"] == {
        "name": "selection", "level": "FAIL",
        "summary": "--attention-backend aiter-ext is accepted, but the launch stops when it "
                   "resolves its arguments: aiter-ext cannot run here (see aiter)"}


@pytest.mark.slow
def test_an_allow_list_excluding_the_plugin_fails_with_the_way_out() -> None:
    proc = doctor("--json", "--attention-backend", "aiter-ext",
                  env={"SGLANG_PLUGINS": "some_other_plugin"})
    assert proc.returncode == 1
    checks = _checks(proc)
    assert checks["discovery"]["level"] == "FAIL"
    assert ("SGLANG_PLUGINS='some_other_plugin' leaves 'aiter_ext' out"
            in checks["discovery"]["summary"])
    assert checks["selection"]["level"] == "FAIL"
    assert ("sglang's plugin loader does not load the plugin (see discovery)"
            in checks["selection"]["summary"])


def _selection(name: str, *, switches: Any = None, statuses: Any = (),
               aiter_problem: str | None = None) -> tuple[str, str]:
    """The selection row, after an aiter row failing on ``aiter_problem`` (if any)."""
    from sglang_aiter_plugin import _doctor
    from sglang_aiter_plugin._switches import Switches

    report = _doctor.Report()
    if aiter_problem is not None:
        report.add("aiter", "FAIL", f"aiter-ext cannot run here: {aiter_problem}")
    _doctor._check_selection(report, name, True, switches or Switches(), list(statuses))
    check = report.checks[-1]
    assert check.name == "selection"
    return check.level, check.summary


def test_selection_is_ok_only_when_nothing_stands_in_the_way() -> None:
    from sglang_aiter_plugin._status import FixState, FixStatus
    from sglang_aiter_plugin._switches import Switches

    applied = [FixStatus(BACKEND, FixState.APPLIED, "")]
    assert _selection("aiter-ext", statuses=applied) == (
        "ok", "--attention-backend aiter-ext can be selected")
    failed = [FixStatus(BACKEND, FixState.FAILED, "it broke")]
    level, summary = _selection("aiter-ext", statuses=failed)
    assert level == "FAIL"
    assert f"the {BACKEND} fix failed: it broke" in summary
    level, summary = _selection(
        "aiter-ext", statuses=applied, switches=Switches(disabled_fixes=frozenset({BACKEND})))
    assert level == "FAIL"
    assert f"the {BACKEND} fix is disabled (SGLANG_AITER_EXT_DISABLE)" in summary
    # ROCm torch but no aiter package: the host check's answer, and the launch stops on it
    level, summary = _selection("aiter-ext", statuses=applied,
                                aiter_problem="no aiter package is installed for this Python")
    assert level == "FAIL"
    assert summary.endswith("the launch stops when it resolves its arguments: aiter-ext cannot "
                            "run here (see aiter)")


@pytest.mark.parametrize("typo", ["aiter_ext", "aiterext", "aiter-ex"])
def test_a_likely_typo_of_aiter_ext_fails_with_a_suggestion(typo: str) -> None:
    level, summary = _selection(typo)
    assert level == "FAIL"
    assert summary == (f"'{typo}' is not an attention backend of this sglang; did you mean "
                       "'aiter-ext'? The launch would fail with `invalid choice`.")


def test_an_unknown_name_without_a_suggestion_is_a_sentence() -> None:
    assert _selection("") == ("FAIL", "'' is not an attention backend of this sglang. The launch "
                                      "would fail with `invalid choice`.")


@pytest.mark.slow
def test_sglang_that_does_not_import_is_said_once() -> None:
    """SGLANG_PLATFORM naming no platform makes 0.5.19+ fail `import sglang`; every check that
    needs sglang would fail from it, so they are named in the sglang row, not run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    env["SGLANG_PLATFORM"] = "garbage"
    imports = subprocess.run([sys.executable, "-c", "import sglang"], capture_output=True,
                             text=True, env=env, timeout=600)
    if imports.returncode == 0:
        pytest.skip("this sglang release imports with SGLANG_PLATFORM='garbage'")
    cause = imports.stderr.strip().splitlines()[-1]
    proc = doctor("--json", "--attention-backend", "aiter-ext", env={"SGLANG_PLATFORM": "garbage"})
    assert proc.returncode == 1
    checks = json.loads(proc.stdout)["checks"]
    (sglang,) = [c for c in checks if c["name"] == "sglang"]
    assert sglang["level"] == "FAIL"
    assert f"but `import sglang` fails here: {cause[:120]}" in sglang["summary"]
    assert sglang["summary"].endswith("Not checked while it fails: discovery, fixes, selection")
    assert [c["name"] for c in checks] == [
        "plugin", "sglang", "platform", "aiter", "switches", "package"]
    (package,) = [c for c in checks if c["name"] == "package"]  # the modules that need sglang
    assert package["level"] == "ok", package  # are counted, not failed: the sglang row says why
    assert "need sglang, which does not import here" in package["summary"]
    assert "KeyError" not in proc.stdout


@pytest.mark.slow
@pytest.mark.parametrize("deleted", [None, "backend/pool.py"])
def test_without_sglang_doctor_says_it_is_not_installed(tmp_path: Path,
                                                        deleted: str | None) -> None:
    """A Python that has every dependency but sglang (links to this environment's packages),
    with a copy of the package (``deleted``: one of its modules removed)."""
    site = Path(sysconfig.get_paths()["purelib"])
    deps = tmp_path / "deps"
    deps.mkdir()
    for entry in site.iterdir():
        if not entry.name.startswith(("sglang", "_editable")) and entry.suffix != ".pth":
            (deps / entry.name).symlink_to(entry)
    copy = tmp_path / "copy" / "sglang_aiter_plugin"
    shutil.copytree(ROOT / "sglang_aiter_plugin", copy,
                    ignore=shutil.ignore_patterns("__pycache__"))
    if deleted is not None:
        (copy / deleted).unlink()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "PYTHON"))}
    env["PYTHONPATH"] = f"{deps}{os.pathsep}{copy.parent}"
    proc = subprocess.run([sys.executable, "-S", "-m", "sglang_aiter_plugin", "doctor", "--json",
                           "--attention-backend", "aiter-ext"], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=600)
    assert proc.returncode == 1, proc.stderr[-3000:]
    checks = json.loads(proc.stdout)["checks"]
    (sglang,) = [c for c in checks if c["name"] == "sglang"]
    assert sglang["summary"] == (
        f"sglang is not installed for this Python ({sys.executable}); supported releases: "
        f"{_releases.OLDEST_SUPPORTED} to {_releases.NEWEST_TESTED}. Not checked without it: "
        "discovery, fixes, selection")
    assert list(dict.fromkeys(c["name"] for c in checks)) == [
        "plugin", "sglang", "platform", "aiter", "switches", "package"]
    assert "invalid choice" not in proc.stdout
    package, *more = [c for c in checks if c["name"] == "package"]
    if deleted is None:
        assert (package["level"], more) == ("ok", [])
        assert package["summary"].startswith(
            f"all {len(_doctor.MODULES)} modules are in {copy}; ")
        assert package["summary"].endswith(" need sglang, which does not import here")
    else:  # the module is named, whatever else failed
        assert package["level"] == "FAIL"
        assert package["summary"].startswith(
            f"missing from {copy}: sglang_aiter_plugin.backend.pool; the install is incomplete")


def test_the_package_check_knows_every_module_the_package_ships() -> None:
    """A copy missing a module can only be told from what the package should hold."""
    package = ROOT / "sglang_aiter_plugin"
    shipped = {".".join(p.relative_to(package).with_suffix("").parts).removesuffix("__init__")
               .rstrip(".") for p in package.rglob("*.py")}
    assert set(_doctor.MODULES) == shipped
    assert len(_doctor.MODULES) == len(shipped)


def test_a_module_that_does_not_import_is_a_failing_row_naming_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.import_module

    def failing(name: str, package: str | None = None) -> Any:
        if name in {"sglang_aiter_plugin.backend.capacity", "sglang_aiter_plugin.cli"}:
            raise ImportError(f"cannot import {name} (a test)")
        if name == "sglang_aiter_plugin.plugin.spec":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", failing)
    report = _doctor.Report()
    _doctor._check_package(report)
    rows = [(c.level, c.summary) for c in report.checks]
    assert [level for level, _ in rows] == ["FAIL", "FAIL", "FAIL"], rows
    assert rows[0][1].startswith(f"missing from {ROOT / 'sglang_aiter_plugin'}: "
                                 "sglang_aiter_plugin.plugin.spec; the install is incomplete")
    assert rows[1][1].startswith("sglang_aiter_plugin.backend.capacity does not import: "
                                 "ImportError: cannot import sglang_aiter_plugin.backend.capacity")
    assert rows[2][1].startswith("sglang_aiter_plugin.cli does not import: ImportError")
    assert report.exit_code == 1


def test_without_sglang_a_module_stopped_by_sglang_is_counted_and_one_missing_named(
        monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.import_module

    def without_sglang(name: str, package: str | None = None) -> Any:
        if name in {"sglang_aiter_plugin.backend.classes", "sglang_aiter_plugin.selftest.run"}:
            raise ModuleNotFoundError("No module named 'sglang'", name="sglang")
        if name == "sglang_aiter_plugin.backend.pool":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        if name == "sglang_aiter_plugin.cli":
            raise ImportError("cannot import cli (a test)")
        return real(name, package)

    monkeypatch.setattr(importlib, "import_module", without_sglang)
    report = _doctor.Report()
    _doctor._check_package(report, False)
    rows = [(c.level, c.summary) for c in report.checks]
    assert [level for level, _ in rows] == ["FAIL", "FAIL"], rows
    assert rows[0][1].startswith(f"missing from {ROOT / 'sglang_aiter_plugin'}: "
                                 "sglang_aiter_plugin.backend.pool; the install is incomplete")
    assert rows[1][1].startswith("sglang_aiter_plugin.cli does not import: ImportError")

    monkeypatch.setattr(importlib, "import_module", lambda name, package=None: (
        without_sglang(name, package) if "pool" not in name and "cli" not in name
        else real(name, package)))
    report = _doctor.Report()
    _doctor._check_package(report, False)
    assert [(c.level, c.summary) for c in report.checks] == [
        ("ok", f"all {len(_doctor.MODULES)} modules are in {ROOT / 'sglang_aiter_plugin'}; "
               f"{len(_doctor.MODULES) - 2} import, 2 need sglang, which does not import here")]


def test_the_collectives_row_says_every_call_of_the_installed_release_is_known() -> None:
    from sglang_aiter_plugin.fixes.collectives.calls import communicator_calls

    report = _doctor.Report()
    _doctor._communicator_calls(report)
    spec = importlib.util.find_spec("sglang.srt.distributed.parallel_state")
    assert spec is not None
    assert spec.origin is not None
    count = len(communicator_calls(Path(spec.origin).read_text()))
    assert [(c.name, c.level, c.summary) for c in report.checks] == [
        ("collectives", "ok", f"all {count} calls sglang's GroupCoordinator makes on aiter's "
         "communicator are known to the plugin")]


def test_the_collectives_row_warns_with_the_site_of_each_call_it_does_not_know(
        tmp_path: Path) -> None:
    """A simulated ``parallel_state.py``: one call the plugin knows, two it does not."""
    source = tmp_path / "parallel_state.py"
    source.write_text(
        "class GroupCoordinator:\n"
        "    def _all_gather_into_tensor(self, output, input):\n"
        "        self.ca_comm.all_gather_reg(input, out=output)\n"
        "    def fused_qknorm_allreduce(self, qkv, q_w, k_w, eps):\n"
        "        comm = self.ca_comm\n"
        "        return comm.custom_fused_qknorm_ar(qkv, q_w, k_w, eps)\n"
        "    def gather(self, input):\n"
        "        return self.ca_comm.all_gather_reg(input)\n")
    report = _doctor.Report()
    _doctor._communicator_calls(report, str(source))
    assert [(c.name, c.level) for c in report.checks] == [("collectives", "warn")] * 2
    assert report.checks[0].summary == (
        "GroupCoordinator.fused_qknorm_allreduce calls aiter's ca_comm.custom_fused_qknorm_ar "
        f"({source}:6), which the plugin does not know: it may register the caller's tensors "
        "during CUDA-graph capture, with no fix to take it off that path; please report this "
        "sglang release")
    assert report.checks[1].summary.startswith(
        f"GroupCoordinator.gather calls aiter's ca_comm.all_gather_reg ({source}:8), ")
    assert report.exit_code == 0  # a warning: the launch is not stopped


LOADER_ERROR_0_5_10 = (
    "ImportError: cannot import name 'plugins' from 'sglang.srt' (unknown location)")


def test_a_release_without_a_plugin_loader_is_named() -> None:
    """0.5.10 has neither sglang.srt.plugins nor sglang/srt/__init__.py: its error is not
    `No module named`. Checked on the words, and on the real release where it is installed."""
    from sglang_aiter_plugin._doctor import _DISCOVERY_PROBE, _failure_cause

    want = ("this sglang has no plugin loader (sglang.srt.plugins appeared in "
            f"{_releases.OLDEST_SUPPORTED}); supported releases: {_releases.OLDEST_SUPPORTED} to "
            f"{_releases.NEWEST_TESTED}")
    assert _failure_cause(f"Traceback ...\n{LOADER_ERROR_0_5_10}\n") == want
    assert _failure_cause("ModuleNotFoundError: No module named 'sglang.srt.plugins'") == want
    release = ROOT / ".sglang-releases" / "0.5.10"
    if not (release / ".complete").is_file():
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    env["PYTHONPATH"] = str(release)
    real = subprocess.run([sys.executable, "-c", _DISCOVERY_PROBE], capture_output=True,
                          text=True, env=env, timeout=600)
    assert real.stderr.strip().splitlines()[-1] == LOADER_ERROR_0_5_10
    assert _failure_cause(real.stderr) == want


@pytest.mark.parametrize("also", ["", ",bogus"])
def test_a_retired_fix_name_is_noted_once_in_the_switches_rows_and_fails_nothing(
        also: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from sglang_aiter_plugin import _switches

    report = _doctor.Report()
    env = {"SGLANG_AITER_EXT_DISABLE": f"capture-old{also}"}
    retired = {"capture-old": "sglang does it itself"}
    _doctor._check_switches(report, _switches.read_switches(["attention-backend"], env, retired))
    rows = [c for c in report.checks if c.name == "switches"]
    assert sum(c.summary.count("capture-old") for c in rows) == 1
    noted = next(c for c in rows if "capture-old" in c.summary)
    assert "capture-old (in SGLANG_AITER_EXT_DISABLE) is no longer a fix" in noted.summary
    assert "nothing to disable" in noted.summary
    if also:  # the unknown name fails, the retired one does not
        assert [c.level for c in rows] == ["FAIL", "info"]
    else:
        assert [c.level for c in rows] == ["ok"]
        assert noted.summary.startswith("plugin on; disabled fixes: none; batch bounds check: off")
        assert report.exit_code == 0


@pytest.mark.parametrize(("bound", "level", "says"), [
    (True, "info", "the installed aiter: applied (aiter's get_meta_param caches at most 128"),
    (False, "info", "the installed aiter: skipped (sglang's aiter backend has no mla_decode_fwd"),
], ids=["aiter-mla-decode", "no-aiter"])
def test_the_split_table_row_says_what_the_installed_aiters_mla_decode_does(
    bound: bool, level: str, says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``mla-split-table`` is aiter's defect: the row reads the ``mla_decode_fwd`` sglang's
    backend module binds (the double of aiter's cached split table where aiter imports)."""
    from sglang.srt.layers.attention import aiter_backend

    from testkit.doubles import aiter_mla

    if bound:
        monkeypatch.setattr(aiter_backend, "mla_decode_fwd", aiter_mla.mla_decode_fwd,
                            raising=False)
    else:
        monkeypatch.delattr(aiter_backend, "mla_decode_fwd", raising=False)
    report = _doctor.Report()
    _doctor._graph_set_up(report)
    (row,) = [c for c in report.checks if c.name == "graph set-up mla-split-table"]
    assert row.level == level
    assert says in row.summary, row.summary
