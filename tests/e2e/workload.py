"""What every end-to-end server is asked, and how two servers' answers are compared.

Each server runs the same requests in the same order, so a backend's answers can be compared
with ``torch_native``'s on the same topology (the weights are the same checkpoint; float32).
"""

from __future__ import annotations

import dataclasses
import math
import random

from testkit.server import Output, Server

__all__ = ["BURST_3X", "BURST_3X_LENGTHS", "EVICTION_BURST", "EVICTION_BURST_LENGTHS",
           "GPU_LOGPROB_TOL", "LOGPROB_TOL", "LONG", "LONG_BATCH", "LONG_NEW_TOKENS",
           "MLA_POOL", "SMALL", "SMALL_LENGTHS", "STAGGERED", "Answers", "Mismatch", "compare",
           "compare_to_near_tie", "prompts", "reference_noise", "run_prompts"]

LOGPROB_TOL = 1e-4
"""Largest |log-probability difference| accepted between two backends in float32. Two identical
``torch_native`` servers agree to about 5e-7; a decode kernel reading one wrong KV slot moves
log-probabilities by 1e-2 and more."""

GPU_LOGPROB_TOL = 2e-3
"""The same on a CUDA GPU, where sglang's Triton kernels and aiter's reduce in other orders than
torch's. Measured on the H200 (gpu/results/server_graphs.md): the two reference servers
(``torch_native``, and sglang's ``triton`` with graphs) differ by up to 5.0e-4, aiter's real
Triton kernel by 3.8e-4, the capture-safe references by 4.8e-7; the control moves
log-probabilities by 5e-2. The GPU tier checks the reference pair against half of it in every
run."""

NEW_TOKENS = 16
VOCAB_LOW, VOCAB_HIGH = 3, 512  # token ids 0-2 are special in the checkpoint's config


def prompts(count: int, seed: int, lengths: tuple[int, int] = (6, 30)) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(VOCAB_LOW, VOCAB_HIGH) for _ in range(rng.randint(*lengths))]
            for _ in range(count)]


@dataclasses.dataclass
class Answers:
    """One server's answers, by request set."""

    sets: dict[str, list[Output]] = dataclasses.field(default_factory=dict)


class Mismatch(AssertionError):
    """Two servers' answers differ beyond the tolerance."""


def compare(ours: list[Output], reference: list[Output], what: str,
            tol: float = LOGPROB_TOL) -> float:
    """Raise :class:`Mismatch` unless tokens are equal and log-probabilities within ``tol``;
    return the largest |log-probability difference|."""
    if len(ours) != len(reference):
        raise Mismatch(f"{what}: {len(ours)} answers, reference {len(reference)}")
    worst = 0.0
    for i, (a, b) in enumerate(zip(ours, reference, strict=True)):
        if a.tokens != b.tokens:
            first = next(j for j, (x, y) in enumerate(zip(a.tokens, b.tokens, strict=False))
                         if x != y) if len(a.tokens) == len(b.tokens) else -1
            raise Mismatch(f"{what}: prompt {i} tokens differ from token {first}: "
                           f"{a.tokens} vs {b.tokens}")
        _no_nan(a, what, i)
        worst = max(worst, *(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)))
    if worst > tol:
        raise Mismatch(f"{what}: tokens equal, but log-probabilities differ by up to {worst:.3g} "
                       f"(tolerance {tol:g})")
    return worst


def _no_nan(answer: Output, what: str, i: int) -> None:
    if any(math.isnan(x) for x in answer.logprobs):
        raise Mismatch(f"{what}: prompt {i} has NaN log-probabilities: {answer.logprobs}")


def compare_to_near_tie(ours: list[Output], reference: list[Output], what: str,
                        tol: float) -> tuple[float, list[str]]:
    """:func:`compare` for long greedy outputs: equal tokens with log-probabilities within
    ``tol`` up to a prompt's first differing token, which must be a near-tie (the two picks'
    log-probabilities within ``tol``: the reference itself could have picked either); past it
    that prompt is not compared. Return the largest |log-probability difference| and the
    near-tie splits."""
    if len(ours) != len(reference):
        raise Mismatch(f"{what}: {len(ours)} answers, reference {len(reference)}")
    worst, splits = 0.0, []
    for i, (a, b) in enumerate(zip(ours, reference, strict=True)):
        if len(a.tokens) != len(b.tokens):
            raise Mismatch(f"{what}: prompt {i}: {len(a.tokens)} tokens, reference "
                           f"{len(b.tokens)}")
        _no_nan(a, what, i)
        for j, (ta, tb, la, lb) in enumerate(zip(a.tokens, b.tokens, a.logprobs, b.logprobs,
                                                  strict=True)):
            if not abs(la - lb) <= tol:
                raise Mismatch(f"{what}: prompt {i} token {j}: {ta} ({la:.4g}) vs {tb} "
                               f"({lb:.4g}) differ beyond {tol:g}")
            worst = max(worst, abs(la - lb))
            if ta != tb:
                splits.append(f"prompt {i} token {j}: {ta} ({la:.5f}) vs {tb} ({lb:.5f})")
                break
    return worst, splits


def reference_noise(ours: list[Output], reference: list[Output]) -> tuple[float, list[str]]:
    """Two reference servers compared: the largest |log-probability difference| over the
    positions where both had produced the same tokens so far, and each place where they then
    pick different tokens (prompt, position, and the two picks' log-probabilities: a near-tie
    when these are equal within the tolerance)."""
    worst, splits = 0.0, []
    for i, (a, b) in enumerate(zip(ours, reference, strict=True)):
        for j, (ta, tb, la, lb) in enumerate(zip(a.tokens, b.tokens, a.logprobs, b.logprobs,
                                                  strict=True)):
            if ta != tb:
                splits.append(f"prompt {i} token {j}: {ta} ({la:.4f}) vs {tb} ({lb:.4f})")
                break
            worst = max(worst, abs(la - lb))
    return worst, splits


PROMPTS = prompts(6, seed=1)
PREFIX = prompts(1, seed=2, lengths=(40, 40))[0]
EXTENSION = prompts(1, seed=3, lengths=(12, 12))[0]


def run_prompts(server: Server, answers: Answers) -> None:
    """The comparison set: 6 prompts of 6-30 tokens, 16 greedy tokens each, in one batch."""
    answers.sets["prompts"] = server.generate(PROMPTS, NEW_TOKENS)


def run_prefix_hit(server: Server, answers: Answers) -> None:
    """A 40-token prompt, then the same 40 tokens plus 12: the second extends a radix-cache hit."""
    answers.sets["prefix"] = server.generate([PREFIX], 1)
    answers.sets["prefix-hit"] = server.generate([PREFIX + EXTENSION], 8)


STAGGERED = [2, 4, 6, 9, 12, 16]
"""Output lengths for :data:`PROMPTS` on the GPU: the decode batch shrinks from 6 to 1 as the
requests finish, so every captured graph size (1, 2, 4, 6) is replayed."""
BURST_3X = prompts(20, seed=5, lengths=(4, 60))
"""Over three times a pool of 6, mixed prompt lengths..."""
BURST_3X_LENGTHS = [1 + (i * 7) % 24 for i in range(len(BURST_3X))]
"""... and output lengths (1-24 tokens)."""
LONG = prompts(1, seed=6, lengths=(490, 490))[0]
LONG_NEW_TOKENS = 16
"""490 + 16 tokens: near the servers' ``--context-length`` of 512 (sglang admits 511)."""
LONG_BATCH = prompts(6, seed=7, lengths=(480, 490))
"""Six long requests at once (a full pool near context length, about 3,000 KV tokens in one
decode batch): at page size 16, the most a per-page graph ``kv_indices`` can be written past."""


MLA_POOL = 16
"""``--max-running-requests`` of the GPU MLA servers, whose decode graphs stop at 4: batches of
5 to 16 decode eagerly."""
SMALL = PROMPTS[:4]
SMALL_LENGTHS = [4, 8, 12, 16]
"""Small batches: 4 requests finishing one after another (decode batches of 4, 3, 2, 1: every
graph of ``[1, 2, 4]`` replayed)."""
EVICTION_BURST = [prompts(1, seed=100 + n, lengths=(n, n))[0]
                  for n in range(5, 5 + 2 * MLA_POOL, 2)]
"""A full pool of prompts of distinct lengths (5, 7, ..., 35 tokens) ..."""
EVICTION_BURST_LENGTHS = [130 + 2 * i for i in range(MLA_POOL)]
"""... and outputs of 130 to 160 tokens: about 150 eager decode steps of 5 to 16 requests, each
with a new KV total (a batch's total grows by its size at every step), so each a new key of
aiter's split-table cache: more than its 128 entries, which evicts every graph's table."""
