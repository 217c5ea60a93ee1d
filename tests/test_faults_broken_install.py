"""A broken install: doctor reports it row by row, and sglang still starts with another backend.

Four ways an install breaks: a copy of the package first on ``PYTHONPATH`` with a module missing
(one the fixes import at start-up, or one only the backend's classes import), the same with a
syntax error, and an empty ``sglang_aiter_plugin/`` folder in the directory the
launch starts from (a namespace package that shadows the editable install for ``python -c`` and
``python -m``, which put that directory first on ``sys.path``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from testkit.subproc import PRELUDE, Result

pytestmark = pytest.mark.slow

PACKAGE = Path(__file__).resolve().parents[1] / "sglang_aiter_plugin"


def _without_fold(package: Path) -> None:
    (package / "fixes" / "attention_backend" / "choice.py").unlink()


def _without_pool(package: Path) -> None:
    (package / "backend" / "pool.py").unlink()


def _syntax_error(package: Path) -> None:
    with (package / "_switches.py").open("a") as f:
        f.write("\ndef (\n")


BREAKAGES: dict[str, tuple[Callable[[Path], None] | None, list[str]]] = {
    # breakage -> (what it does to a copy of the package, what doctor's FAIL rows must say)
    "module missing": (_without_fold, [
        "failed: cannot load built-in sglang_aiter_plugin.fixes.attention_backend.fix: "
        "ModuleNotFoundError: No module named "
        "'sglang_aiter_plugin.fixes.attention_backend.choice'",
        "/copy/sglang_aiter_plugin: sglang_aiter_plugin.fixes.attention_backend.choice; the "
        "install is incomplete",
    ]),
    # start-up and the fix's own modules import: only building the backend would fail
    "backend module missing": (_without_pool, [
        "failed: the plugin's classes do not import, so a launch with --attention-backend "
        "aiter-ext fails building them: ModuleNotFoundError: No module named "
        "'sglang_aiter_plugin.backend.pool'",
        "/copy/sglang_aiter_plugin: sglang_aiter_plugin.backend.pool; the install is incomplete",
        "sglang_aiter_plugin.backend.buffers, sglang_aiter_plugin.backend.classes do not import: "
        "ModuleNotFoundError",
        "sglang_aiter_plugin.backend.graph_state does not import: ModuleNotFoundError",
    ]),
    "syntax error": (_syntax_error, [
        "its register() failed, so sglang is unchanged: SyntaxError: invalid syntax",
        "SyntaxError: invalid syntax (_switches.py, line",
        "/copy/sglang_aiter_plugin/_switches.py)",
        "sglang_aiter_plugin._registration, ",
    ]),
    "shadowing folder": (None, [
        "entry point found but sglang failed to load it: AttributeError: module "
        "'sglang_aiter_plugin' has no attribute 'register'",
        "/start/sglang_aiter_plugin']",
    ]),
}

START = """
import os
os.chdir({start!r})  # '' on sys.path: imports see this directory first, as a launch from it
from sglang.srt.plugins import load_plugins
load_plugins()
if {call_register}:
    import sglang_aiter_plugin
    sglang_aiter_plugin.register()  # again, by hand: it returns, whatever failed inside
from sglang.srt.server_args import ServerArgs
record = ServerArgs(model_path={model!r}, device="cpu", attention_backend="triton",
                    skip_tokenizer_init=True)
if hasattr(record, "resolve_once"):
    record.resolve_once()
print("RESULT " + json.dumps(record.attention_backend))
"""


@pytest.fixture(params=list(BREAKAGES))
def broken(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, str], Path]:
    """(breakage, environment, start directory) of a broken install."""
    damage = BREAKAGES[request.param][0]
    start = tmp_path / "start"
    start.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    if damage is None:
        (start / "sglang_aiter_plugin").mkdir()
    else:
        shutil.copytree(PACKAGE, tmp_path / "copy" / "sglang_aiter_plugin",
                        ignore=shutil.ignore_patterns("__pycache__"))
        damage(tmp_path / "copy" / "sglang_aiter_plugin")
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(tmp_path / "copy"), os.environ.get("PYTHONPATH")]))
    return request.param, env, start


def test_doctor_reports_a_broken_install_and_sglang_starts_with_another_backend(
    broken: tuple[str, dict[str, str], Path], model_dir: Path
) -> None:
    breakage, env, start = broken
    exe = shutil.which("sglang-aiter-plugin", path=os.path.dirname(sys.executable))
    assert exe
    code = START.format(start=str(start), model=str(model_dir),
                        call_register=breakage != "shadowing folder")
    # doctor and the launch side by side: two fresh interpreters, as a user would run them
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=env, cwd=start)
             for cmd in ([exe, "doctor", "--json"], [sys.executable, "-c", PRELUDE + code])]
    (out, err), (launch_out, launch_err) = (p.communicate(timeout=600) for p in procs)
    doctor_rc, launch_rc = (p.returncode for p in procs)

    assert "Traceback" not in out + err, err[-3000:]
    checks = json.loads(out)["checks"]
    assert doctor_rc == 1
    failures = " | ".join(c["summary"] for c in checks if c["level"] == "FAIL")
    for words in BREAKAGES[breakage][1]:
        assert words in failures, failures
    rows = {c["name"] for c in checks}
    assert {"plugin", "sglang", "platform", "aiter", "discovery"} <= rows  # the rest still print
    if breakage == "backend module missing":  # every row but those two says all is well
        assert {c["name"] for c in checks if c["level"] == "FAIL"} == {
            "fix attention-backend", "package"}

    launch = Result(launch_rc, launch_out, launch_err)
    assert launch.returncode == 0, launch.stderr[-3000:]
    assert launch.data == "triton"
    if breakage == "syntax error":  # register() said why, and left sglang unchanged
        said = "sglang-aiter-plugin failed to register; sglang is unchanged"
        assert launch.stderr.count(said) == 2  # by sglang's loader, and by hand
        assert "SyntaxError: invalid syntax" in launch.stderr
