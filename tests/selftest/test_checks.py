"""A case's verdict from its batches (``checks._judged``): what it says of buffers a batch would
read or write past, for the batches nothing held back."""

from __future__ import annotations

from sglang_aiter_plugin.selftest.checks import _judged
from sglang_aiter_plugin.selftest.decode import SizeOutcome

SHORT = "reads kv_indptr (34 entries, 35 needed)"


def test_a_batch_that_raised_had_its_buffers_short_and_did_not_run_past_them() -> None:
    """sglang's eager metadata raises on a short buffer before any kernel runs: the verdict is
    the error, and it does not say the batch ran past its buffers (nor under which flag)."""
    raised = SizeOutcome(34, 33, error=RuntimeError("expanded size (33) must match (34)"),
                         past=SHORT)
    result = _judged([raised], "33 requests padded by MLP sync", unsafe=False)
    assert result.outcome == "raised"
    assert f"its buffers were short: batch 34 {SHORT}" in result.detail
    assert "ran past" not in result.detail
    assert "--upstream-unsafe" not in result.detail


def test_a_batch_that_ran_to_its_end_ran_past_its_buffers_and_names_the_flag_that_let_it() -> None:
    ran = [SizeOutcome(32, 32, max_err=0.001), SizeOutcome(34, 33, max_err=0.002, past=SHORT)]
    unsafe = _judged(ran, "P = 33", unsafe=True)
    assert unsafe.outcome == "ok"
    assert unsafe.detail.endswith(f"; ran past its buffers (--upstream-unsafe): batch 34 {SHORT}")
    # an eager batch whose reads nothing holds back runs without the flag
    eager = _judged(ran, "P = 33", unsafe=False)
    assert eager.detail.endswith(f"; ran past its buffers: batch 34 {SHORT}")
    assert "its buffers were short" not in eager.detail


def test_batches_within_their_buffers_add_nothing() -> None:
    result = _judged([SizeOutcome(2, 2, max_err=0.001)], "P = 33", unsafe=True)
    assert result.detail == "batch 2 right, max |diff| 0.001 (P = 33)"
