"""How two servers' answers are compared (no server started): a NaN log-probability never passes,
and the long-output comparison accepts only near-ties."""

from __future__ import annotations

import pytest

from testkit.server import Output
from tests.e2e import workload

TOL = 1e-3


def _out(tokens: list[int], logprobs: list[float]) -> Output:
    return Output(tokens, logprobs, 0)


def test_equal_tokens_with_nan_log_probabilities_do_not_compare_equal() -> None:
    ref = [_out([5, 6], [-1.0, -2.0])]
    with pytest.raises(workload.Mismatch, match="NaN"):
        workload.compare([_out([5, 6], [-1.0, float("nan")])], ref, "set", TOL)
    with pytest.raises(workload.Mismatch, match="NaN"):
        workload.compare_to_near_tie([_out([5, 6], [float("nan"), -2.0])], ref, "set", TOL)


def test_a_split_at_a_near_tie_ends_the_comparison_of_that_prompt() -> None:
    ref = [_out([5, 6, 7], [-1.0, -2.0, -3.0]), _out([1, 2], [-1.0, -1.0])]
    ours = [_out([5, 9, 4], [-1.0, -2.0005, -9.0]), _out([1, 2], [-1.0, -1.0002])]
    worst, splits = workload.compare_to_near_tie(ours, ref, "set", TOL)
    assert splits == ["prompt 0 token 1: 9 (-2.00050) vs 6 (-2.00000)"]
    assert worst == pytest.approx(5e-4)


def test_a_split_that_is_no_near_tie_is_a_mismatch() -> None:
    ref = [_out([5, 6], [-1.0, -2.0])]
    with pytest.raises(workload.Mismatch, match="token 1"):
        workload.compare_to_near_tie([_out([5, 9], [-1.0, -1.5])], ref, "set", TOL)
    with pytest.raises(workload.Mismatch, match="tokens, reference"):
        workload.compare_to_near_tie([_out([5], [-1.0])], ref, "set", TOL)


def test_the_eviction_burst_makes_more_eager_decode_steps_than_the_cache_holds() -> None:
    """Each step of a continuous batch of more than 4 requests is a new (batch, KV total): the
    steps before the fifth-last request finishes outnumber aiter's 128 cache entries."""
    lengths = sorted(workload.EVICTION_BURST_LENGTHS)
    assert len(workload.EVICTION_BURST) == len(lengths) == workload.MLA_POOL
    assert len({len(p) for p in workload.EVICTION_BURST}) == workload.MLA_POOL  # distinct
    assert lengths[-5] - 1 > 128  # decode steps while at least 5 requests run
