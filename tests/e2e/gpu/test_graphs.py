"""Ragged decode graphs in a real server on a GPU: sglang's own CUDA-graph runner captures the
decode graphs at start-up and replays them while serving; ``aiter`` (upstream) and ``aiter-ext``
answer as the reference servers do, a graph was replayed at every captured size (counted in the
server), a decode kernel reading one wrong KV slot does not answer as the reference, and a burst
of over three times the pool completes with every graph size the queue produced."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest

from tests.e2e import workload
from tests.e2e.gpu.conftest import POOL
from tests.e2e.serving import Run
from tests.e2e.workload import GPU_LOGPROB_TOL

pytestmark = [pytest.mark.gpu, pytest.mark.slow, pytest.mark.e2e]
Served = Callable[[str], Run]


def _ok(*runs: Run) -> None:
    for run in runs:
        assert run.failure is None, f"{run.name}: {run.failure}"


@pytest.mark.servers("torch_native", "triton")
def test_the_two_reference_servers_agree(gpu_served: Served) -> None:
    """The tolerance's measure: sglang's Triton backend with graphs against torch_native, to half
    the tolerance wherever both produced the same tokens; where a greedy pick differs, the two
    picks are a near-tie (their log-probabilities within the tolerance)."""
    native, triton = gpu_served("torch_native"), gpu_served("triton")
    _ok(native, triton)
    noise: dict[str, float] = {}
    for s in ("graphs", "prefix", "prefix-hit", "burst", "long"):
        noise[s], splits = workload.reference_noise(triton.answers[s], native.answers[s])
        print(f"triton vs torch_native, {s}: max |dlogprob| {noise[s]:.3g}; splits {splits}")
        for split in splits:
            picks = [float(x) for x in re.findall(r"\((-?[\d.]+)\)", split)]
            assert abs(picks[0] - picks[1]) <= GPU_LOGPROB_TOL, split
    assert max(noise.values()) <= GPU_LOGPROB_TOL / 2, noise


@pytest.mark.servers("torch_native", "aiter", "aiter-ext")
@pytest.mark.parametrize("name", ["aiter", "aiter-ext"])
def test_decode_graphs_answer_as_the_reference(gpu_served: Served, name: str) -> None:
    run, native = gpu_served(name), gpu_served("torch_native")
    _ok(run, native)
    worst = {s: workload.compare(run.answers[s], native.answers[s], s, GPU_LOGPROB_TOL)
             for s in ("graphs", "prefix", "prefix-hit", "burst")}
    print(f"{name} vs torch_native: max |dlogprob| per request set {worst}")


@pytest.mark.servers("aiter", "aiter-ext", "triton")
@pytest.mark.parametrize("name", ["aiter", "aiter-ext", "triton"])
def test_a_graph_replayed_at_every_captured_size(gpu_served: Served, name: str) -> None:
    run = gpu_served(name)
    _ok(run)
    captured = run.captured()
    assert captured == [1, 2, 4, POOL], captured  # one GPU: clamped to the pool
    replays = run.replays()
    per_size = {bs: sum(1 for b, _ in replays if b == bs) for bs in captured}
    print(f"{name}: captured {captured}, replays per graph size {per_size}")
    assert all(per_size.values()), per_size
    # each batch replays the smallest captured graph that holds it
    assert all(bs == min(c for c in captured if c >= raw) for bs, raw in replays), replays


@pytest.mark.servers("aiter-ext")
def test_the_graphs_ran_the_capture_safe_reference_kernels(gpu_served: Served) -> None:
    run = gpu_served("aiter-ext")
    _ok(run)
    rows = sorted({int(line.rsplit("=", 1)[1]) for line in run.lines()
                   if "paged_attention_ragged rows=" in line})
    assert set(run.captured()) <= set(rows), rows  # called once per size while capturing


@pytest.mark.servers("torch_native", "aiter-ext")
def test_control_one_wrong_kv_slot_differs(gpu_served: Served) -> None:
    """The comparison sees attention inside the replayed graphs: while a flag file exists the
    decode kernel reads one wrong KV slot (a device flag the graphs read) and the answers
    differ; once it is gone they match again."""
    run, native = gpu_served("aiter-ext"), gpu_served("torch_native")
    _ok(run, native)
    with pytest.raises(workload.Mismatch) as caught:
        workload.compare(run.answers["control"], native.answers["graphs"], "control",
                         GPU_LOGPROB_TOL)
    print(f"control: {caught.value}")
    workload.compare(run.answers["after-control"], native.answers["graphs"], "after",
                     GPU_LOGPROB_TOL)


@pytest.mark.servers("aiter-ext")
def test_a_burst_of_three_times_the_pool_completes(gpu_served: Served) -> None:
    run = gpu_served("aiter-ext")
    _ok(run)
    burst = run.answers["burst"]
    assert len(burst) == len(workload.BURST_3X) >= 3 * POOL
    assert [len(o.tokens) for o in burst] == workload.BURST_3X_LENGTHS
    assert not run.errors(), run.errors()[:5]
    raw = {r for _, r in run.replays()}
    assert POOL in raw, sorted(raw)  # the queue kept the pool full


@pytest.mark.servers("torch_native", "aiter-ext")
def test_the_radix_cache_served_an_extend_after_a_prefix_hit(gpu_served: Served) -> None:
    run = gpu_served("aiter-ext")
    _ok(run)
    hit = run.answers["prefix-hit"][0]
    assert hit.cached_tokens >= len(workload.PREFIX) - 1, hit
    assert len(hit.tokens) == 8
