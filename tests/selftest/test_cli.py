"""``sglang-aiter-plugin selftest`` on the CPU, through its own code, as an operator runs it.

What cannot exist here (aiter's ROCm kernels, a ROCm host) comes in through sglang's own plugin
loader in every child the self-test starts, as the GPU server tier installs it: the test-only
plugin of ``testkit/doubles/server_plugin.py`` with ``aiter`` (torch reference kernels with aiter's
per-row contract), ``unified`` (aiter's real Triton ``unified_attention`` from the ``amd-aiter``
wheel, under Triton's CPU interpreter) and ``rocm-host``. Everything else is the installed sglang
release: its parser, its pools, its metadata code and Triton kernels (interpreted), its MLP-sync
padding. Graph capture needs a GPU; on the CPU every other case runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sglang_aiter_plugin.selftest.cases import CASES
from testkit.doubles import server_plugin
from testkit.doubles.aiter_kernels import WRONG_SLOT_FLAG_VAR
from testkit.doubles.aiter_triton import installed_tree
from testkit.doubles.short_buffer import SHORT_BUFFER_VAR

ROOT = Path(__file__).resolve().parents[2]
CPU_CASES = [c for c in CASES if not c.needs_gpu]
NEEDS_AITER = pytest.mark.skipif(
    installed_tree() is None,
    reason="amd-aiter is not installed: bash tools/env.sh installs it into .venv/opt/amd-aiter")


def selftest(tmp: Path, *args: str, doubles: str | None = "aiter,unified,rocm-host",
             env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m sglang_aiter_plugin selftest --device cpu ARGS`` with the doubles' plugin on the
    path (``doubles=None``: none at all, as on a machine without ROCm)."""
    full = {k: v for k, v in os.environ.items()
            if not k.startswith(("SGLANG_AITER_EXT", "SGLANG_E2E_"))
            and k not in ("SGLANG_PLUGINS", "SGLANG_PLATFORM")}
    paths = [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
    if doubles is not None:
        paths.insert(0, str(server_plugin.site_dir(tmp / "site")))
        full[server_plugin.DOUBLES_VAR] = doubles
    full.update(PYTHONPATH=os.pathsep.join(paths), TRITON_INTERPRET="1", **(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "sglang_aiter_plugin", "selftest", "--device", "cpu", *args],
        capture_output=True, text=True, env=full, cwd=tmp, timeout=1200, check=False)


@pytest.fixture(scope="module")
def everything(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every case, as ``--json``."""
    done = selftest(tmp_path_factory.mktemp("selftest"), "--json")
    assert done.stdout.strip(), done.stderr[-3000:]
    report: dict[str, Any] = json.loads(done.stdout)
    report["returncode"] = done.returncode
    report["stderr"] = done.stderr
    return report


@pytest.mark.slow
@NEEDS_AITER
def test_every_case_but_graph_capture_runs_and_aiter_ext_passes(everything: dict[str, Any]
                                                                ) -> None:
    assert everything["returncode"] == 0, everything
    assert everything["exit_code"] == 0
    cases = {c["case"]: c for c in everything["cases"]}
    assert list(cases) == [c.name for c in CASES]
    for case in CASES:
        row = cases[case.name]
        if case.needs_gpu:
            for kind in ("upstream", "aiter-ext"):
                assert row[kind]["outcome"] == "skipped", row
                assert "needs a GPU" in row[kind]["detail"]
        else:
            assert row["aiter-ext"]["outcome"] == "ok", row
            assert row["aiter-ext"]["sizes"], row  # it ran batches, above P included
            assert max(row["aiter-ext"]["sizes"]) == 34, row  # P = 33, padded to 34
    assert everything["summary"].startswith("PASS: aiter-ext passed 5 of 5 cases that ran")


@pytest.mark.slow
@NEEDS_AITER
def test_each_case_says_on_stderr_how_it_ended_as_it_ends(everything: dict[str, Any]) -> None:
    """One line per case (the JSON on stdout is the report); in the order the cases ended."""
    lines = [ln for ln in everything["stderr"].splitlines() if ln.startswith("[")]
    total = len(CASES)
    assert [ln.split("] ", 1)[0] for ln in lines] == [f"[{i}/{total}" for i in range(1, total + 1)]
    for row in everything["cases"]:
        (line,) = [ln for ln in lines if ln.split("] ", 1)[1].startswith(row["case"] + ":")]
        assert f"upstream aiter {row['upstream']['outcome']}" in line
        assert f"aiter-ext {row['aiter-ext']['outcome']}" in line


@pytest.mark.slow
@NEEDS_AITER
def test_upstream_raises_on_every_padded_eager_batch(everything: dict[str, Any]) -> None:
    """The batch DP attention's MLP sync pads to 34 rows for a pool of 33: upstream's per-batch
    buffers hold 33 (and it stops with a shape error, writing nothing); aiter-ext is right."""
    for row in everything["cases"]:
        if row["case"].endswith("-eager"):
            assert row["upstream"]["outcome"] == "raised", row
            assert "must match the existing size (34)" in row["upstream"]["detail"], row


@pytest.mark.slow
@NEEDS_AITER
def test_upstreams_draft_batch_above_the_pool_is_held_back(everything: dict[str, Any]) -> None:
    """sglang's draft kernel would write 35 entries into each 34-entry step row of upstream's
    kv_indptr: the batch of 34 does not run without --upstream-unsafe; the smaller ones do."""
    (row,) = [c for c in everything["cases"] if c["case"] == "draft-metadata"]
    upstream = row["upstream"]
    assert upstream["outcome"] == "held back", row
    assert upstream["held_back"] == [34]
    assert 34 not in upstream["sizes"]
    assert upstream["sizes"]
    assert "--upstream-unsafe" in upstream["detail"]


@pytest.mark.slow
@NEEDS_AITER
def test_with_upstream_unsafe_the_held_back_batch_runs_and_shows_the_defect(
        tmp_path: Path) -> None:
    done = selftest(tmp_path, "--json", "--only", "draft-metadata", "--upstream-unsafe")
    row = json.loads(done.stdout)["cases"][0]
    assert row["upstream"]["outcome"] in ("wrong", "crashed"), row
    assert row["upstream"]["held_back"] == []
    if row["upstream"]["outcome"] == "wrong":  # the rows overlap: step 0's last entry is lost
        assert "batch 34 step" in row["upstream"]["detail"], row
        assert "ran past its buffers (--upstream-unsafe): batch 34 writes past kv_indptr's " \
               "last row (34 entries, 35 needed)" in row["upstream"]["detail"], row
    assert row["aiter-ext"]["outcome"] == "ok"
    assert done.returncode == 0  # upstream's failures are shown, never the exit status


@pytest.mark.slow
@NEEDS_AITER
def test_a_kernel_reading_one_wrong_kv_slot_fails_aiter_ext_with_exit_status_1(
        tmp_path: Path) -> None:
    """The control: the decode kernel reads each sequence's second KV slot for its first."""
    flag = tmp_path / "wrong-slot"
    flag.touch()
    done = selftest(tmp_path, "--only", "ragged-page1-eager", "--only", "mla-eager",
                    env={WRONG_SLOT_FLAG_VAR: str(flag)})
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    table = done.stdout
    ragged = next(ln for ln in table.splitlines() if ln.startswith("ragged-page1-eager "))
    assert "wrong (max |diff|" in ragged.split("raised", 1)[1], table  # aiter-ext's column
    assert next(ln for ln in table.splitlines() if ln.startswith("mla-eager ")).split()[2] == "ok"
    assert "FAIL: aiter-ext passed 1 of 2 cases that ran" in table
    paste = table.split("--- paste into a bug report ---", 1)[1].split("--- end ---", 1)[0]
    assert "ragged-page1-eager: upstream raised; aiter-ext wrong" in paste
    assert "sglang " in paste
    assert "torch " in paste


@pytest.mark.slow
@NEEDS_AITER
def test_aiter_ext_with_a_buffer_cut_one_row_short_fails_with_exit_status_1(
        tmp_path: Path) -> None:
    """aiter-ext's workspace one batch row short of aiter's layout: the kernel double does not
    write it, so every row still compares right; the verdict fails the case all the same."""
    done = selftest(tmp_path, "--json", "--only", "ragged-page1-eager",
                    doubles="aiter,unified,rocm-host,short-buffer",
                    env={SHORT_BUFFER_VAR: "workspace_buffer"})
    assert done.returncode == 1, done.stdout + done.stderr[-3000:]
    data = json.loads(done.stdout)
    assert data["exit_code"] == 1
    ext = data["cases"][0]["aiter-ext"]
    assert ext["outcome"] == "wrong", ext
    assert ext["detail"].startswith("its own buffers are short: batch 34 writes workspace_buffer")
    assert ext["sizes"] == [34]  # it ran to its end...
    assert ext["max_err"] < 2e-2  # ...and the comparison could not see it
    assert data["summary"].startswith("FAIL: aiter-ext passed 0 of 1 cases that ran")


@pytest.mark.slow
def test_without_rocm_or_the_doubles_nothing_runs_and_the_exit_status_is_2(
        tmp_path: Path) -> None:
    done = selftest(tmp_path, doubles=None)
    assert done.returncode == 2, done.stdout + done.stderr[-3000:]
    assert "nothing ran: aiter-ext cannot run here: this torch" in done.stdout
    assert "is not a ROCm build" in done.stdout
    as_json = json.loads(selftest(tmp_path, "--json", doubles=None).stdout)
    assert as_json["exit_code"] == 2
    assert "is not a ROCm build" in as_json["problem"]


def test_an_unknown_case_is_refused_naming_the_cases(capsys: pytest.CaptureFixture[str]) -> None:
    from sglang_aiter_plugin.cli import main

    assert main(["selftest", "--only", "ragged-page2-graphs"]) == 2
    err = capsys.readouterr().err
    assert "unknown case ragged-page2-graphs" in err
    assert all(c.name in err for c in CASES)


def test_list_names_every_case_and_what_it_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from sglang_aiter_plugin.cli import main

    assert main(["selftest", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines] == [c.name for c in CASES]
    assert all(c.describe() in ln for c, ln in zip(CASES, lines, strict=True))
