"""A DeepSeek-architecture model (multi-head latent attention with DeepSeek-V2's attention shapes:
16 heads, a 512 + 64 latent) served on one rank through ``aiter-ext``, aiter's kernels as torch
references (MLA decode ``mla_decode_fwd`` without a split table, the non-persistent path of a
non-fp8 KV cache; the extend as multi-head attention through ``flash_attn_varlen_func``): it
answers as sglang's own Triton backend, token for token and log-probability within tolerance; an
MLA decode reading one wrong KV slot does not."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from packaging.version import Version

from tests.e2e import workload
from tests.e2e.conftest import mla_problem
from tests.e2e.serving import Run

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

SETS = ("prompts", "prefix", "prefix-hit")


@pytest.fixture(autouse=True)
def _mla_serves(e2e_version: Version) -> None:
    problem = mla_problem(e2e_version)
    if problem:
        pytest.skip(f"sglang {e2e_version}: {problem}")


def _ok(*runs: Run) -> None:
    for run in runs:
        assert run.failure is None, f"{run.name}: {run.failure}"


def test_aiter_ext_answers_as_the_triton_reference(served: Callable[[str], Run]) -> None:
    run, reference = served("mla/aiter-ext"), served("mla/triton")
    _ok(run, reference)
    worst = {s: workload.compare(run.answers[s], reference.answers[s], s) for s in SETS}
    print(f"max |dlogprob| per request set: {worst}")


def test_the_decode_ran_aiters_mla_kernel(served: Callable[[str], Run]) -> None:
    """Every decode batch went through ``aiter.mla.mla_decode_fwd`` (the double records each
    new batch size), never through the paged decode of a non-MLA model."""
    run = served("mla/aiter-ext")
    _ok(run)
    rows = {int(m[1]) for line in run.lines()
            if (m := re.search(r"mla_decode_fwd rows=(\d+)", line))}
    assert {1, len(workload.PROMPTS)} <= rows, sorted(rows)  # the prefix-hit pair; the prompts
    assert not any("paged_attention_ragged rows=" in line for line in run.lines())


def test_extend_after_a_prefix_hit_reused_the_cache(served: Callable[[str], Run]) -> None:
    """The second request of the pair extends 12 tokens over a cached 40-token prefix: aiter's
    extend rebuilds keys and values for the whole sequence from the latent cache."""
    hit = served("mla/aiter-ext").answers["prefix-hit"][0]
    assert hit.cached_tokens >= len(workload.PREFIX) - 1, hit
    assert len(hit.tokens) == 8


def test_control_one_wrong_latent_slot_differs_from_the_reference(
        served: Callable[[str], Run]) -> None:
    """The comparison sees the MLA decode: while a flag file exists the decode kernel reads each
    sequence's second latent slot for its first, and the answers no longer match; without the
    flag they match again."""
    run, reference = served("mla/aiter-ext"), served("mla/triton")
    _ok(run, reference)
    with pytest.raises(workload.Mismatch) as caught:
        workload.compare(run.answers["control"], reference.answers["prompts"], "control")
    print(f"control: {caught.value}")
    workload.compare(run.answers["after-control"], reference.answers["prompts"], "after")
