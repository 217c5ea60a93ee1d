"""A case's verdict from its batches (``checks.judge``), the row comparison (``decode.row_error``)
and each form's hold-back rule (``checks.holds`` over ``decode.overruns``)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from sglang_aiter_plugin.selftest.cases import Case
from sglang_aiter_plugin.selftest.checks import TOLERANCE, holds, judge
from sglang_aiter_plugin.selftest.decode import SizeOutcome, overruns, row_error

SHORT = "reads kv_indptr (34 entries, 35 needed)"
WRITES = "writes workspace_buffer (100 bytes, 101 needed by aiter's layout)"


def test_a_batch_that_raised_had_its_buffers_short_and_did_not_run_past_them() -> None:
    """sglang's eager metadata raises on a short buffer before any kernel runs: upstream's
    verdict is the error, and it does not say the batch ran past its buffers (nor under which
    flag)."""
    raised = SizeOutcome(34, 33, error=RuntimeError("expanded size (33) must match (34)"),
                         past=SHORT)
    result = judge("upstream", [raised], "33 requests padded by MLP sync", unsafe=False)
    assert result.outcome == "raised"
    assert f"its buffers were short: batch 34 {SHORT}" in result.detail
    assert "ran past" not in result.detail
    assert "--upstream-unsafe" not in result.detail


def test_upstreams_batch_that_ran_to_its_end_ran_past_its_buffers_and_names_the_flag() -> None:
    ran = [SizeOutcome(32, 32, max_err=0.001), SizeOutcome(34, 33, max_err=0.002, past=SHORT)]
    unsafe = judge("upstream", ran, "P = 33", unsafe=True)
    assert unsafe.outcome == "ok"
    assert unsafe.detail.endswith(f"; ran past its buffers (--upstream-unsafe): batch 34 {SHORT}")
    eager = judge("upstream", ran, "P = 33", unsafe=False)  # an eager read is not held back
    assert eager.detail.endswith(f"; ran past its buffers: batch 34 {SHORT}")
    assert "its buffers were short" not in eager.detail


@pytest.mark.parametrize("batch", [
    SizeOutcome(34, 33, max_err=0.001, past=WRITES),  # the comparison saw nothing
    SizeOutcome(34, 33, past=SHORT, error=RuntimeError("expanded size (33) must match (34)")),
    SizeOutcome(34, 33, past=WRITES),  # the draft's metadata check: no rows compared
], ids=["rows-right", "raised", "metadata-right"])
def test_aiter_ext_past_its_own_buffers_is_wrong_whatever_the_comparison_says(
        batch: SizeOutcome) -> None:
    result = judge("aiter-ext", [SizeOutcome(2, 2, max_err=0.001), batch], "P = 33",
                   unsafe=False)
    assert result.outcome == "wrong"
    assert result.detail.startswith(f"its own buffers are short: batch 34 {batch.past}")
    assert result.sizes == ([2, 34] if batch.error is None else [2])


def test_batches_within_their_buffers_are_ok_and_add_nothing() -> None:
    for kind in ("upstream", "aiter-ext"):
        result = judge(kind, [SizeOutcome(2, 2, max_err=0.001)], "P = 33", unsafe=True)
        assert result.outcome == "ok"
        assert result.detail == "batch 2 right, max |diff| 0.001 (P = 33)"


def test_a_row_wrong_only_downward_is_wrong_with_its_absolute_difference() -> None:
    want = torch.zeros(3, 2, 4)
    got = want.clone()
    got[1, 0, 2] = -0.5  # below the reference, nowhere above it
    err = row_error(got, want)
    assert err == 0.5
    result = judge("aiter-ext", [SizeOutcome(3, 3, max_err=err)], "P = 33", unsafe=False)
    assert result.outcome == "wrong"
    assert result.max_err == 0.5
    assert "max |diff| 0.5 at batch 3" in result.detail


def test_a_nan_row_is_infinitely_wrong() -> None:
    got = torch.zeros(2, 2)
    got[0, 0] = float("nan")
    assert row_error(got, torch.zeros(2, 2)) == float("inf")


def test_with_several_batches_the_worst_decides_and_is_named_with_its_difference() -> None:
    batches = [SizeOutcome(2, 2, max_err=0.001), SizeOutcome(8, 8, max_err=0.75),
               SizeOutcome(16, 16, max_err=0.03), SizeOutcome(34, 33, max_err=0.002)]
    result = judge("aiter-ext", batches, "P = 33", unsafe=False)
    assert result.outcome == "wrong"
    assert result.max_err == 0.75
    assert "max |diff| 0.75 at batch 8" in result.detail
    assert result.sizes == [2, 8, 16, 34]
    # just within the tolerance everywhere: ok, with the worst difference
    within = [SizeOutcome(2, 2, max_err=0.001), SizeOutcome(8, 8, max_err=TOLERANCE)]
    assert judge("aiter-ext", within, "P = 33", unsafe=False).outcome == "ok"


def test_a_batch_that_raised_decides_over_a_later_wrong_one() -> None:
    batches = [SizeOutcome(2, 2, max_err=0.9), SizeOutcome(4, 4, error=ValueError("boom"))]
    result = judge("upstream", batches, "P = 33", unsafe=False)
    assert result.outcome == "raised"
    assert result.detail.startswith("at batch 4: ValueError: boom")


def backend(**tensors: int) -> SimpleNamespace:
    """A backend holding int32 buffers of the given numbers of entries (``workspace_buffer``:
    bytes), with a ragged decode's shape for aiter's workspace layout."""
    held = {name: torch.zeros(n, dtype=torch.uint8 if name == "workspace_buffer" else torch.int32)
            for name, n in tensors.items()}
    return SimpleNamespace(num_head=2, max_num_partitions=1, head_dim=4, v_head_dim=0,
                           input_dtype=torch.float16, topk=1, **held)


ROW = 2 * 1 * (2 * 4 + 4 * 2)
"""aiter's workspace bytes per batch row for :func:`backend`'s shape."""


@pytest.mark.parametrize(("case", "short", "enough"), [
    # graphs: a per-batch buffer one entry short is held back, exactly enough runs
    (Case("g", "ragged", 16, "graphs"), dict(kv_indptr=35, kv_last_page_len=33),
     dict(kv_indptr=35, kv_last_page_len=34)),
    (Case("g", "ragged", 1, "graphs"), dict(kv_indptr=34), dict(kv_indptr=35)),
    (Case("g", "ragged", 1, "graphs"), dict(kv_indptr=35, cuda_graph_kv_indices=99),
     dict(kv_indptr=35, cuda_graph_kv_indices=100)),
    (Case("g", "unified", 1, "graphs"), dict(kv_indptr=35, qo_indptr_unified_decode=34),
     dict(kv_indptr=35, qo_indptr_unified_decode=35)),
    # eager: only a kernel's own writes are held back (a short read raises in sglang first)
    (Case("e", "ragged", 1, "eager"), dict(kv_indptr=35, workspace_buffer=34 * ROW - 1),
     dict(kv_indptr=35, workspace_buffer=34 * ROW)),
    # the draft wrapper: a step row one entry short of bs * topk + 1
    (Case("d", "draft", 1, "metadata"), dict(kv_indptr=34), dict(kv_indptr=35)),
], ids=["graphs-page16", "graphs-indptr", "graphs-indices", "graphs-unified", "eager", "draft"])
def test_each_forms_rule_holds_back_one_entry_short_and_runs_exactly_enough(
        case: Case, short: dict[str, int], enough: dict[str, int]) -> None:
    tokens = 100
    over = overruns(backend(**short), case, 34, tokens)
    assert over
    assert holds(case, "upstream", unsafe=False)(over)
    assert not holds(case, "upstream", unsafe=True)(over)  # --upstream-unsafe runs it
    assert not holds(case, "aiter-ext", unsafe=False)(over)  # aiter-ext runs, and fails
    assert overruns(backend(**enough), case, 34, tokens) == ""


def test_an_eager_batch_short_only_in_what_sglang_reads_is_not_held_back() -> None:
    case = Case("e", "ragged", 1, "eager")
    over = overruns(backend(kv_indptr=34), case, 34, 100)
    assert over == SHORT
    assert not holds(case, "upstream", unsafe=False)(over)
