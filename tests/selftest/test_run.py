"""The self-test's parent: exit statuses, crashed and timed-out children, what it prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any

import pytest

from sglang_aiter_plugin.selftest import report
from sglang_aiter_plugin.selftest.cases import CASES, by_name
from sglang_aiter_plugin.selftest.run import Options, Row, Run, _Child, _read

HOST = {"plugin": "0.1.0", "sglang": "0.5.23", "torch": "2.9.0", "hip": "7.0", "cuda": None,
        "python": "3.12.3", "aiter": "0.1.7 (commit c16d44b93a52)", "aiter_from": "/opt/aiter",
        "gpu": "AMD Instinct MI300X", "arch": "gfx942:sramecc+:xnack-"}


def outcome(what: str, detail: str = "", max_err: float | None = None) -> dict[str, Any]:
    return {"outcome": what, "detail": detail or what, "max_err": max_err, "sizes": [],
            "held_back": [], "peak_gpu_mib": None}


def a_run(*pairs: tuple[str, str], problem: str | None = None) -> Run:
    rows = []
    for case, (up, ext) in zip(CASES, pairs, strict=False):
        rows.append(Row(case, {"upstream": outcome(up), "aiter-ext": outcome(ext)}, 1.0))
    return Run(HOST, rows, Options(), 3.0, problem)


@pytest.mark.parametrize(("pairs", "code"), [
    ((("wrong", "ok"), ("raised", "ok"), ("crashed", "ok")), 0),  # upstream never counts
    ((("ok", "ok"), ("ok", "wrong")), 1),
    ((("ok", "ok"), ("ok", "raised")), 1),
    ((("ok", "crashed"), ("ok", "skipped")), 1),
    ((("skipped", "skipped"), ("held back", "skipped")), 2),  # nothing of aiter-ext ran
    ((("ok", "ok"), ("skipped", "skipped")), 0),
])
def test_the_exit_status_is_aiter_exts_alone(pairs: tuple[tuple[str, str], ...],
                                              code: int) -> None:
    assert a_run(*pairs).exit_code == code


def test_a_host_problem_is_exit_status_2_with_why() -> None:
    run = Run(HOST, [Row(c) for c in CASES], Options(), problem="aiter-ext cannot run here: x")
    assert run.exit_code == 2
    assert "nothing ran: aiter-ext cannot run here: x" in report.as_text(run)
    assert json.loads(report.as_json(run))["problem"] == "aiter-ext cannot run here: x"


def test_nothing_ran_says_why_from_the_skips() -> None:
    run = a_run(("skipped", "skipped"))
    assert run.nothing_ran == "no aiter-ext case could run here: skipped"
    assert "NOTHING RAN" in report.summary(run)


def test_the_json_holds_what_the_table_shows() -> None:
    run = a_run(("raised", "ok"), ("wrong", "wrong"), ("held back", "ok"))
    run.rows[1].outcomes["aiter-ext"]["max_err"] = 1.71
    text, data = report.as_text(run), json.loads(report.as_json(run))
    assert data["exit_code"] == 1
    assert data["summary"] == report.summary(run)
    assert data["summary"] in text
    for row, shown in zip(run.rows, data["cases"], strict=True):
        line = next(ln for ln in text.splitlines() if ln.startswith(row.case.name + " "))
        for kind in ("upstream", "aiter-ext"):
            assert shown[kind] == row.outcomes[kind]
            assert shown[kind]["outcome"] in line
            assert f"{kind if kind == 'aiter-ext' else 'upstream aiter'}: " \
                   f"{shown[kind]['detail']}" in text
    assert "wrong (max |diff| 1.71)" in text
    host = report.host_line(HOST, "cuda")
    assert data["host"] == HOST
    assert host in text
    for fact in ("sglang 0.5.23", "aiter 0.1.7 (commit c16d44b93a52)", "torch 2.9.0 (HIP 7.0)",
                 "AMD Instinct MI300X (gfx942:sramecc+:xnack-)"):
        assert fact in host


def test_a_child_killed_by_a_signal_is_crashed_with_its_last_words() -> None:
    crashed = _read("", "Memory access fault by GPU node-2\n", -11)
    assert crashed["outcome"] == "crashed"
    assert crashed["detail"] == ("killed by signal SIGSEGV: Memory access fault by GPU "
                                 "node-2")
    assert _read("noise\n", "", 3)["detail"] == "exit status 3: no output"


@pytest.mark.slow
def test_a_child_past_its_timeout_is_killed_with_its_process_group() -> None:
    started = time.monotonic()
    child = _Child({"probe": True, "device": "cpu"}, {})
    while (probe := child.poll(timeout=0.3)) is None:
        time.sleep(0.01)
    assert probe["outcome"] == "crashed"
    assert probe["detail"] == "timed out after 0 s (--timeout)"
    assert time.monotonic() - started < 5  # killed, not waited for
    with pytest.raises(ProcessLookupError):  # the whole group is gone
        os.killpg(child.process.pid, 0)


def test_importing_the_selftest_imports_neither_torch_nor_sglang() -> None:
    code = ("import sys, pkgutil, importlib, sglang_aiter_plugin.selftest as s\n"
            "names = [m.name for m in pkgutil.iter_modules(s.__path__)]\n"
            "[importlib.import_module('sglang_aiter_plugin.selftest.' + n) for n in names]\n"
            "import sglang_aiter_plugin.cli\n"
            "print(sorted(names), sorted(m for m in sys.modules\n"
            "      if m.split('.')[0] in ('torch', 'sglang', 'triton', 'aiter')))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("[]"), done.stdout
    assert "checks" in done.stdout
    assert "decode" in done.stdout


def test_cases_are_named_once_and_selected_in_the_tables_order() -> None:
    assert len({c.name for c in CASES}) == len(CASES)
    assert [c.name for c in by_name(["mla-eager", "ragged-page1-graphs"])] == [
        "ragged-page1-graphs", "mla-eager"]
