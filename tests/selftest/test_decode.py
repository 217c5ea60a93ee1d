"""The self-test's graph loop on the CPU: every captured size through its metadata and forward,
run eagerly (``capture=False``: graph capture itself needs a GPU), and what upstream's buffers
would overrun. sglang's Triton metadata kernels are interpreted; the decode kernels are the torch
references of ``testkit/doubles/aiter_kernels.py``."""

from __future__ import annotations

from typing import Any

import pytest

from testkit.subproc import run_python

LOOP = """
import pathlib, tempfile
from testkit.doubles import aiter_kernels
aiter_kernels.install()
from sglang_aiter_plugin.selftest.cases import Case
from sglang_aiter_plugin.selftest.decode import build_backend, graph_sizes
from sglang_aiter_plugin.selftest.reference import fill_paged_requests
from testkit.sglang_setup import SCENARIOS, configure, write_model_dir
page = {page}
setup = configure(write_model_dir(pathlib.Path(tempfile.mkdtemp()) / "m"),
                  SCENARIOS["two-batch-overlap"], ("--page-size", str(page), "--dtype", "float16"),
                  pool=33)
rows = []
with setup.scope:
    fill_paged_requests(setup.runner, 33, page, seed=0)
    case = Case("ragged", "ragged", page, "graphs")
    for size in graph_sizes(case, setup, build_backend({kind!r}, setup), "cpu", seed=1,
                            max_len=40, hold=lambda short: {hold}, capture=False):
        rows.append(dict(bs=size.bs, real=size.real_rows, err=size.max_err, held=size.held,
                         past=size.past, error=repr(size.error) if size.error else None))
print("RESULT " + json.dumps(dict(rows=rows, capture_bs=setup.capture_bs)))
"""


def loop(kind: str, page: int, hold: str = "bool(short)") -> dict[str, Any]:
    result = run_python(LOOP.format(kind=kind, page=page, hold=hold),
                        env={"TRITON_INTERPRET": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    data: dict[str, Any] = result.data
    return data


@pytest.mark.slow
@pytest.mark.parametrize("page", [1, 16])
def test_aiter_ext_is_right_at_every_captured_size_and_holds_every_batch(page: int) -> None:
    data = loop("aiter-ext", page)
    assert [r["bs"] for r in data["rows"]] == data["capture_bs"]
    assert max(data["capture_bs"]) == 34  # above the pool of 33
    for row in data["rows"]:
        assert row["held"] == "", row
        assert row["error"] is None, row
        assert row["real"] == min(row["bs"], 33)  # the padding row is sglang's, not checked
        assert row["err"] < 2e-2, row


@pytest.mark.slow
def test_upstreams_page_16_batch_above_the_pool_reads_past_kv_last_page_len() -> None:
    """Upstream keeps ``kv_last_page_len`` at the pool's 33 rows; aiter reads one entry per row
    at page size 16, so the batch of 34 is the one held back."""
    rows = {r["bs"]: r for r in loop("upstream", 16)["rows"]}
    assert "reads kv_last_page_len (33 entries, 34 needed)" in rows[34]["held"]
    assert all(r["held"] == "" and r["err"] < 2e-2 for bs, r in rows.items() if bs < 34), rows


@pytest.mark.slow
def test_a_batch_run_all_the_same_says_what_it_read_past() -> None:
    rows = {r["bs"]: r for r in loop("upstream", 16, hold="False")["rows"]}
    assert rows[34]["held"] == ""
    assert "reads kv_last_page_len (33 entries, 34 needed)" in rows[34]["past"]
    assert all(r["past"] == "" for bs, r in rows.items() if bs < 34), rows
