"""One rank: ``aiter-ext`` and upstream ``aiter`` (aiter's kernels as torch references) and the
unified path (aiter's real Triton kernel) answer as ``torch_native`` does, token for token and
log-probability within tolerance; a decode kernel reading one wrong KV slot does not."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.e2e import workload
from tests.e2e.serving import Run

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


def _compare(run: Run, reference: Run) -> dict[str, float]:
    """Every request set both ran (the unified run answers the prefix-hit pair only)."""
    assert run.failure is None, str(run.failure)
    assert reference.failure is None, str(reference.failure)
    sets: list[str] = [s for s in ("prompts", "prefix", "prefix-hit") if s in run.answers]
    assert "prefix-hit" in sets, sorted(run.answers)
    worst = {s: workload.compare(run.answers[s], reference.answers[s], s) for s in sets}
    print(f"max |dlogprob| per request set: {worst}")
    return worst


@pytest.mark.parametrize("name", ["single/aiter-ext", "single/aiter", "single/aiter-ext-unified"])
def test_backend_answers_as_torch_native(served: Callable[[str], Run], name: str) -> None:
    _compare(served(name), served("single/torch_native"))


def test_extend_after_a_prefix_hit_reused_the_cache(served: Callable[[str], Run]) -> None:
    hit = served("single/aiter-ext").answers["prefix-hit"][0]
    assert hit.cached_tokens >= len(workload.PREFIX) - 1, hit
    assert len(hit.tokens) == 8


def test_the_unified_path_ran_aiters_triton_kernel(served: Callable[[str], Run]) -> None:
    run = served("single/aiter-ext-unified")
    assert run.failure is None, str(run.failure)
    kernel_lines = [line for r in run.records.values() for line in r.splitlines()
                    if "unified_attention" in line or "paged_attention_ragged" in line]
    assert any("unified_attention from aiter" in line for line in kernel_lines), kernel_lines
    print("\n".join(sorted(set(kernel_lines))))
    assert not any("paged_attention_ragged rows=" in line for line in kernel_lines)


def test_control_one_wrong_kv_slot_differs_from_torch_native(
        served: Callable[[str], Run]) -> None:
    """The comparison sees attention: the same server, its decode kernel reading one wrong KV
    slot while a flag file exists, no longer matches; without the flag it matches again."""
    run, reference = served("single/aiter-ext"), served("single/torch_native")
    assert run.failure is None, str(run.failure)
    with pytest.raises(workload.Mismatch) as caught:
        workload.compare(run.answers["control"], reference.answers["prompts"], "control")
    shifted = [
        max((abs(x - y) for i, (x, y) in enumerate(zip(a.logprobs, b.logprobs, strict=True))
             if a.tokens[: i + 1] == b.tokens[: i + 1]), default=0.0)
        for a, b in zip(run.answers["control"], reference.answers["prompts"], strict=True)]
    print(f"control: {caught.value}\n|dlogprob| while the tokens still agreed, per prompt: "
          + ", ".join(f"{d:.3g}" for d in shifted))
    workload.compare(run.answers["after-control"], reference.answers["prompts"], "after")
