"""Eager batches above the request pool: MLP-sync padding under DP attention, graphs on and off.

sglang's own ``prepare_mlp_sync_batch`` pads each rank's decode and idle batch to a multiple of the
attention-TP size (a rank beside a fuller one is padded to that one's size), and the batch then
runs eagerly through ``init_forward_metadata`` when no graph takes it. Every case below builds
the batch with that real sglang code (real ``ServerArgs`` from sglang's parser, DP attention at
attention-TP 2 and 4, two-batch overlap, odd and even request pools P), hands it to the real
backend code, and compares the cumulative lengths the kernel is handed with the batch's own.
``aiter-ext`` must be correct at every size; upstream ``aiter`` is run on the same cases and
every case where sglang pads above P is a strict expected failure, so the gap stays visible.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from testkit.batch_paths import PATHS, SCENARIOS, Case
from testkit.subproc import run_python

MODES_DP = (
    ("decode", "full", "P", "P"),
    ("decode", "one-beside-full", 1, "P"),
    ("idle", "beside-full", 0, "P"),
    ("extend", "full", "P", "3P"),
)
MODES_PLAIN = (("decode", "full", "P", "P"), ("extend", "full", "P", "3P"))
SETTINGS = (
    ("dp-attention", 33),
    ("dp-attention", 32),
    ("dp-attention-tp4", 33),
    ("dp-attention-tp4", 34),
    ("two-batch-overlap", 33),
)


def _count(value: int | str, pool: int) -> int:
    if isinstance(value, str):
        return {"P": pool, "3P": 3 * pool}[value]
    return value


def _stale_prefill_qo_indptr() -> bool:
    """0.5.11-0.5.22: after upstream regrows ``qo_indptr`` for a graph above P, its prefill
    updater writes the old tensor and the extend kernel is handed the new, all-zero one
    (0.5.22 measured by the compatibility matrix; 0.5.23 hands the kernel the right one)."""
    from packaging.version import Version

    from sglang_aiter_plugin._sglang import installed_sglang_version

    release = installed_sglang_version()
    return release is not None and Version(release.base_version) <= Version("0.5.22")


def _cases() -> list[tuple[Case, bool]]:
    """Every case, with whether upstream gets it wrong (then a strict xfail): sglang pads the
    eager batch above P, or (``_stale_prefill_qo_indptr``) an extend after graphs above P."""
    out = []
    stale = _stale_prefill_qo_indptr()
    for kind in ("aiter-ext", "upstream"):
        for scenario, pool in SETTINGS:
            tp = SCENARIOS[scenario].attn_tp_size
            dp = scenario.startswith("dp-attention")
            graph_pads = pool % (tp if dp else 2) != 0
            for mode, _, rows, other in MODES_DP if dp else MODES_PLAIN:
                for path in PATHS:
                    for graphs in (False, True):
                        case = Case(kind, scenario, pool, path, graphs, mode,
                                    _count(rows, pool), _count(other, pool))
                        padded = dp and mode != "extend" and pool % tp != 0
                        stale_extend = stale and graphs and graph_pads and mode == "extend"
                        out.append((case, padded or stale_extend))
    return out


CASES = _cases()

CODE = """
from testkit.batch_paths import main
main([{cases!r}, {model!r}])
"""


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """All cases, run once in a fresh interpreter with sglang's Triton kernels interpreted."""
    root = tmp_path_factory.mktemp("eager")
    cases = root / "cases.json"
    cases.write_text(json.dumps([c.__dict__ for c, _ in CASES]))
    result = run_python(CODE.format(cases=str(cases), model=str(root / "model")),
                        env={"TRITON_INTERPRET": "1"}, timeout=1800)
    assert result.returncode == 0, result.stderr[-3000:]
    return {row["id"]: row for row in result.data}


def _params() -> list[Any]:
    params = []
    for case, above in CASES:
        marks = []
        if case.kind == "upstream" and above:
            marks.append(pytest.mark.xfail(strict=True, reason="upstream sizes buffers by P"))
        params.append(pytest.param(case, marks=marks, id=case.id))
    return params


@pytest.mark.slow
@pytest.mark.parametrize("case", _params())
def test_eager_metadata_is_right_at_the_size_sglang_sends(
    case: Case, outcomes: dict[str, dict[str, Any]]
) -> None:
    got = outcomes[case.id]
    assert got["error"] is None, got["error"]
    assert got["wrong"] == [], got["wrong"]
    assert got["batch"] <= got["capacity"], got


@pytest.mark.slow
@pytest.mark.parametrize(("scenario", "pool"), [s for s in SETTINGS if s[0] != "two-batch-overlap"])
def test_sglang_pads_a_full_rank_to_the_attention_tp_size(
    scenario: str, pool: int, outcomes: dict[str, dict[str, Any]]
) -> None:
    """The sizes the cases ran at are sglang's padding, not P: the measurement is not vacuous."""
    tp = SCENARIOS[scenario].attn_tp_size
    padded = -(-pool // tp) * tp
    for case, _ in CASES:
        if (case.scenario, case.pool, case.kind) != (scenario, pool, "aiter-ext"):
            continue
        got = outcomes[case.id]["batch"]
        if case.mode == "extend":
            assert got == pool, case.id
        else:  # a rank beside a full one, or idle, is padded to the full one's size (MAX_LEN)
            assert got == padded, case.id


@pytest.mark.slow
def test_the_pool_is_no_larger_than_the_largest_batch(
    outcomes: dict[str, dict[str, Any]],
) -> None:
    """aiter-ext's capacity is exactly the largest batch sglang sends on any path: the largest
    eager batch seen here, or the largest graph sglang's rule would capture (counted with graphs
    off too: one rule for every configuration)."""
    largest: dict[tuple[str, int], int] = {}
    capacity: dict[tuple[str, int], int] = {}
    for case, _ in CASES:
        if case.kind != "aiter-ext":
            continue
        got = outcomes[case.id]
        key = (case.scenario, case.pool)
        largest[key] = max(largest.get(key, 0), got["batch"], got["graph"])
        capacity[key] = max(capacity.get(key, 0), got["capacity"])
    assert capacity == largest


def test_cases_are_listed_once() -> None:
    ids = [c.id for c, _ in CASES]
    assert len(ids) == len(set(ids))
    assert Path(__file__).name.startswith("test_")
