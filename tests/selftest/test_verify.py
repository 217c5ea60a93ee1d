"""The self-test's target-verify batches (EAGLE, top-1) on the CPU: every size sglang captures
for a speculative deployment (above the pool too) through the graph loop run eagerly
(``capture=False``: capture needs a GPU) and one eager batch, each through sglang's Triton extend
kernel (interpreted), rows checked against the torch reference; and what the predictor reads."""

from __future__ import annotations

from typing import Any

import pytest

from testkit.subproc import run_python

VERIFY = """
import pathlib, tempfile
from testkit.doubles import aiter_kernels
aiter_kernels.install()
from sglang_aiter_plugin.selftest import checks
from sglang_aiter_plugin.selftest.cases import Case, Deployment
from sglang_aiter_plugin.selftest.decode import (build_backend, eager_batch, graph_sizes,
    overruns, query_rows)
from sglang_aiter_plugin.selftest.reference import fill_paged_requests
from testkit.sglang_setup import write_model_dir
m = write_model_dir(pathlib.Path(tempfile.mkdtemp()) / "m", mla={mla}, aiter_mla_dims={mla})
args = ("--model-path", str(m), "--speculative-algorithm", "EAGLE",
        "--speculative-draft-model-path", str(m), "--speculative-num-steps", "3",
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
        "--max-running-requests", "5", "--enable-two-batch-overlap")
d = Deployment(args, str(m), 5, 1, 1, (1, 3))
out = {{}}
for form in ("graphs", "eager"):
    case = Case("v", {path!r}, 1, form, d, mode="verify")
    setup, pool, others = checks._configured(case, "cpu", pathlib.Path(tempfile.mkdtemp()))
    with setup.scope:
        fill_paged_requests(setup.runner, pool, 1, seed=0)
        backend = build_backend({kind!r}, setup)
        draft = checks._draft_tokens(case, setup)
        if form == "graphs":
            sizes = list(graph_sizes(case, setup, backend, "cpu", 1, 40, hold=lambda s: False,
                                     capture=False, draft=draft))
            out["capture_bs"] = setup.capture_bs
            # the predictor: mask_indptr one entry short of the largest batch
            backend.mask_indptr = backend.mask_indptr[: setup.max_bs]
            out["short"] = overruns(backend, case, setup.max_bs, 0, draft=draft)
        else:
            sizes = [eager_batch(case, setup, backend, "cpu", 2, 40, rows=pool, others=others,
                                 hold=lambda s: False, draft=draft)]
            out["visible"] = query_rows([0, 1], [10, 20], draft)[1]
    out[form] = [dict(bs=s.bs, real=s.real_rows, err=s.max_err, past=s.past,
                      error=repr(s.error) if s.error else None) for s in sizes]
    out[form + "_draft"] = draft
print("RESULT " + json.dumps(out))
"""


def verify(kind: str, path: str = "ragged") -> dict[str, Any]:
    result = run_python(VERIFY.format(kind=kind, path=path, mla=path == "mla"),
                        env={"TRITON_INTERPRET": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    data: dict[str, Any] = result.data
    return data


@pytest.fixture(scope="module")
def ext() -> dict[str, Any]:
    return verify("aiter-ext")


def test_aiter_ext_verifies_right_at_every_captured_size_above_the_pool_too(
        ext: dict[str, Any]) -> None:
    assert ext["graphs_draft"] == 4  # --speculative-num-draft-tokens
    assert [r["bs"] for r in ext["graphs"]] == ext["capture_bs"]
    assert max(ext["capture_bs"]) > 5  # two-batch overlap captures above the pool of 5
    for row in ext["graphs"]:
        assert row["error"] is None, row
        assert row["past"] == "", row
        assert row["real"] == min(row["bs"], 5)
        assert row["err"] is not None, row
        assert row["err"] < 2e-2, row


def test_aiter_ext_verifies_one_eager_batch_of_the_pool(ext: dict[str, Any]) -> None:
    (row,) = ext["eager"]
    assert row["error"] is None, row
    assert row["bs"] == row["real"] == 5
    assert row["err"] is not None, row
    assert row["err"] < 2e-2, row


def test_each_draft_token_sees_its_request_and_the_drafts_up_to_itself(
        ext: dict[str, Any]) -> None:
    assert ext["visible"] == [11, 12, 13, 14, 21, 22, 23, 24]


def test_the_predictor_names_a_verify_buffer_one_entry_short(ext: dict[str, Any]) -> None:
    top = max(ext["capture_bs"])
    assert ext["short"] == f"reads mask_indptr ({top} entries, {top + 1} needed)"


def test_aiter_ext_verifies_mla_right_at_every_captured_size_and_eagerly() -> None:
    """DeepSeek's MTP verify: MLA decode over each request's draft rows (aiter's
    ``mla_decode_fwd`` with ``max_seqlen_q`` the draft tokens: the CPU double), right at every
    captured size (above the pool of 5 too) and for one eager batch of the pool."""
    mla = verify("aiter-ext", "mla")
    assert mla["graphs_draft"] == 4
    assert [r["bs"] for r in mla["graphs"]] == mla["capture_bs"]
    assert max(mla["capture_bs"]) > 5
    for row in [*mla["graphs"], *mla["eager"]]:
        assert row["error"] is None, row
        assert row["past"] == "", row
        assert row["err"] is not None, row
        assert row["err"] < 2e-2, row


DRAFT_EXTEND = """
import pathlib, tempfile
from testkit.doubles import aiter_kernels
aiter_kernels.install()
from sglang_aiter_plugin.selftest import checks
from sglang_aiter_plugin.selftest.cases import Case, Deployment
from sglang_aiter_plugin.selftest.decode import build_backend, graph_sizes
from sglang_aiter_plugin.selftest.reference import fill_paged_requests
from testkit.sglang_setup import write_model_dir
out = {}
for path in ("ragged", "mla"):
    mla = path == "mla"
    m = write_model_dir(pathlib.Path(tempfile.mkdtemp()) / "m", mla=mla, aiter_mla_dims=mla)
    args = ("--model-path", str(m), "--speculative-algorithm", "EAGLE",
            "--speculative-draft-model-path", str(m), "--speculative-num-steps", "3",
            "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
            "--max-running-requests", "5", "--enable-two-batch-overlap")
    case = Case("d", path, 1, "graphs", Deployment(args, str(m), 5, 1, 1, (1, 3)),
                mode="draft-extend")
    setup, pool, _ = checks._configured(case, "cpu", pathlib.Path(tempfile.mkdtemp()))
    with setup.scope:
        fill_paged_requests(setup.runner, pool, 1, seed=0)
        backend = build_backend("aiter-ext", setup)
        sizes = list(graph_sizes(case, setup, backend, "cpu", 1, 40, hold=lambda s: False,
                                 capture=False, draft=checks._draft_tokens(case, setup)))
        out[path] = dict(capture_bs=setup.capture_bs, mode=str(backend.forward_metadata.max_q_len),
                         sizes=[dict(bs=s.bs, real=s.real_rows, err=s.max_err, past=s.past,
                                     error=repr(s.error) if s.error else None) for s in sizes])
print("RESULT " + json.dumps(out))
"""


def test_aiter_ext_draft_extends_right_at_every_captured_size_ragged_and_mla() -> None:
    """The draft's draft-extend graphs (sglang's DRAFT_EXTEND_V2: four tokens a request appended
    to its KV, each seeing the request's KV up to itself), through the graph loop run eagerly, on
    the ragged path (aiter's extend kernel: the CPU double) and MLA's (its decode over each
    request's rows), at every captured size, above the pool of 5 too."""
    result = run_python(DRAFT_EXTEND, env={"TRITON_INTERPRET": "1"})
    assert result.returncode == 0, result.stderr[-3000:]
    for path, data in result.data.items():
        assert [s["bs"] for s in data["sizes"]] == data["capture_bs"], path
        assert max(data["capture_bs"]) > 5
        assert data["mode"] == "4", path  # the metadata's query rows a request
        for row in data["sizes"]:
            assert row["error"] is None, (path, row)
            assert row["past"] == "", (path, row)
            assert row["real"] == min(row["bs"], 5)
            assert row["err"] is not None, (path, row)
            assert row["err"] < 2e-2, (path, row)
