"""The self-test's parent: exit statuses, crashed and timed-out children, what it prints."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sglang_aiter_plugin.selftest import report
from sglang_aiter_plugin.selftest import run as run_module
from sglang_aiter_plugin.selftest.cases import CASES, by_name
from sglang_aiter_plugin.selftest.child import use_device
from sglang_aiter_plugin.selftest.run import Options, Row, Run, device_problem, selftest

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


FAKE_WORKER = """
import json, os, signal, sys, tempfile, time
log = sys.argv[2]
made = tempfile.mkdtemp()  # under the folder the parent made for this worker
with open(log, "a") as f:
    f.write(json.dumps({"pid": os.getpid(), "tmp": os.environ["TMPDIR"], "made": made}) + "\\n")
print("noise on stdout")
print("SELFTEST-RESULT " + json.dumps({"plugin": "0", "problem": os.environ.get("FAKE_PROBLEM")}),
      flush=True)
for line in sys.stdin:
    spec = json.loads(line)
    name = spec["case"]
    if name == "ragged-page16-eager":
        sys.stderr.write("Memory access fault by GPU node-2\\n")
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGSEGV)
    if name == "unified-page1-eager":
        time.sleep(60)
    print("SELFTEST-RESULT " + json.dumps({
        "outcome": "ok", "detail": f"pid {os.getpid()} {sys.argv[1]} "
        f"{spec['env']['SGLANG_USE_AITER_UNIFIED_ATTN']}", "max_err": 0.0, "sizes": [1],
        "held_back": [], "peak_gpu_mib": None}), flush=True)
"""

EAGER = ("ragged-page1-eager", "ragged-page16-eager", "unified-page1-eager", "mla-eager")


def fake_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *only: str,
             **options: Any) -> tuple[Run, list[dict[str, Any]], list[str]]:
    """``selftest`` with workers that speak the worker's protocol without sglang: the page-16 case
    faults, the unified one hangs; the others answer with the worker's pid."""
    script, log = tmp_path / "worker.py", tmp_path / "workers.log"
    script.write_text(FAKE_WORKER.replace("sys.argv[2]", repr(str(log))))
    monkeypatch.setattr(run_module, "CHILD", (sys.executable, str(script)))
    ended: list[str] = []
    run = selftest(Options(device="cpu", only=only, timeout=options.pop("timeout", 5.0),
                           **options), on_case=lambda row: ended.append(row.case.name))
    workers = [json.loads(line) for line in log.read_text().splitlines()]
    return run, workers, ended


def test_a_worker_runs_its_backends_cases_in_turn_and_a_fault_ends_only_that_case(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run, workers, ended = fake_run(tmp_path, monkeypatch, "ragged-page1-eager",
                                   "ragged-page16-eager", "mla-eager")
    rows = {r.case.name: r.outcomes for r in run.rows}
    for kind in ("upstream", "aiter-ext"):
        crashed = rows["ragged-page16-eager"][kind]
        assert crashed["outcome"] == "crashed"
        assert crashed["detail"] == "killed by signal SIGSEGV: Memory access fault by GPU node-2"
        first, after = rows["ragged-page1-eager"][kind], rows["mla-eager"][kind]
        assert first["outcome"] == after["outcome"] == "ok"
        assert first["detail"].split()[:2] != after["detail"].split()[:2]  # a fresh worker
    # two workers at first (one per backend), two more after the faults: four imports, not six
    assert len(workers) == 4
    assert run.exit_code == 1
    assert run.host == {"plugin": "0", "problem": None}
    assert sorted(ended) == sorted(rows)  # every case reported once, as it ended
    for worker in workers:  # the parent removed each worker's folder, faulted or not
        assert Path(worker["tmp"]).name.startswith("sglang-aiter-selftest-")
        assert Path(worker["made"]).is_relative_to(worker["tmp"])
        assert not Path(worker["tmp"]).exists()


def test_a_case_past_its_timeout_is_crashed_its_process_group_killed_and_its_folder_gone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started = time.monotonic()
    run, workers, _ = fake_run(tmp_path, monkeypatch, "unified-page1-eager", "mla-eager",
                               timeout=2.0)
    assert time.monotonic() - started < 20  # killed, not waited for
    rows = {r.case.name: r.outcomes for r in run.rows}
    for kind in ("upstream", "aiter-ext"):
        assert rows["unified-page1-eager"][kind]["outcome"] == "crashed"
        assert rows["unified-page1-eager"][kind]["detail"] == "timed out after 2 s (--timeout)"
        assert rows["mla-eager"][kind]["outcome"] == "ok"
        assert rows["mla-eager"][kind]["detail"].endswith(" 0")  # its own settings
    for worker in workers:
        with pytest.raises(ProcessLookupError):  # the whole group is gone
            os.killpg(worker["pid"], 0)
        assert not Path(worker["tmp"]).exists()


def test_isolate_gives_every_case_a_worker_of_its_own(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run, workers, _ = fake_run(tmp_path, monkeypatch, "ragged-page1-eager", "mla-eager",
                               isolate=True)
    assert len(workers) == 4
    pids = {r.outcomes[k]["detail"].split()[1] for r in run.rows for k in r.outcomes}
    assert len(pids) == 4
    assert run.exit_code == 0


def test_a_host_problem_stops_the_run_before_any_case(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_PROBLEM", "this torch is not a ROCm build")
    run, _, ended = fake_run(tmp_path, monkeypatch, *EAGER)
    assert run.problem == "aiter-ext cannot run here: this torch is not a ROCm build"
    assert run.exit_code == 2
    assert ended == []
    assert all(not r.outcomes for r in run.rows)


@pytest.mark.parametrize("device", ["cuda", "cuda:0", "cuda:7", "cpu"])
def test_the_devices_the_selftest_runs_on(device: str) -> None:
    assert device_problem(device) is None


@pytest.mark.parametrize("device", ["rocm", "cuda:", "cuda:x", "hip:0", "gpu", "CUDA", "cuda:1 "])
def test_any_other_device_is_refused_naming_the_way_out(
        device: str, capsys: pytest.CaptureFixture[str]) -> None:
    from sglang_aiter_plugin.cli import main

    assert main(["selftest", "--device", device]) == 2
    err = capsys.readouterr().err
    assert f"--device {device!r} is not a device the self-test runs on: give cuda or cuda:N" in err


def test_the_help_says_cpu_is_for_the_tests_only(capsys: pytest.CaptureFixture[str]) -> None:
    from sglang_aiter_plugin.cli import main

    with pytest.raises(SystemExit):
        main(["selftest", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "cpu is for the plugin's own tests only" in text
    assert "--isolate" in text


def test_cuda_n_becomes_the_workers_current_device(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    chosen: list[int] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    use_device("cuda:1")
    use_device("cuda")
    use_device("cpu")
    assert chosen == [1]


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
