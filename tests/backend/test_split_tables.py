"""``mla-split-table`` (aiter#4587): an MLA decode graph reads the split table aiter's cache made
for it, and that table must outlive the cache entry.

The scenario (``split_table_scenario.py``) runs sglang's real MLA backend code over the double of
aiter's ``mla.py`` memory contract, with graphs at every captured size, then more than 128 eager
decodes with distinct KV totals, then the graphs again. Upstream is a strict expected failure: its
replays read freed tables. The decision itself (what aiter's lookup does) is tested directly.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
import torch

from sglang_aiter_plugin._rebind import rebound
from sglang_aiter_plugin._status import FixState
from sglang_aiter_plugin.backend import split_tables
from testkit.doubles import aiter_mla
from testkit.subproc import run_python

TOLERANCE = 2e-2  # bf16
SCRIPT = """
from tests.backend.split_table_scenario import run
print("RESULT " + json.dumps(run()))
"""


@pytest.fixture(scope="module")
def runs() -> Any:
    """Both backends in one interpreter (``TRITON_INTERPRET`` must be set before Triton loads:
    sglang's metadata kernels are Triton)."""
    result = run_python(SCRIPT, env={"TRITON_INTERPRET": "1"}, timeout=1200)
    assert result.returncode == 0, result.stderr[-4000:]
    return result.data


def _param(kind: str) -> Any:
    marks = ([pytest.mark.xfail(strict=True, reason="aiter#4587: replays read freed split "
                                "tables once the cache evicted them")]
             if kind == "upstream" else [])
    return pytest.param(kind, marks=marks, id=kind)


@pytest.mark.slow
@pytest.mark.parametrize("kind", [_param("aiter-ext"), _param("upstream")])
def test_mla_graphs_replay_right_after_the_cache_evicted_their_split_tables(
    kind: str, runs: Any
) -> None:
    run = runs[kind]
    assert max(run["capture_bs"]) > run["pool"] > min(run["capture_bs"])  # above and below
    assert max(run["before"]) < TOLERANCE, run["before"]  # right while the cache holds them
    assert run["cache_entries"] == aiter_mla.CACHE_ENTRIES  # every graph's entry evicted
    assert max(run["after"]) < TOLERANCE, dict(zip(run["capture_bs"], run["after"], strict=True))


@pytest.mark.slow
def test_aiter_ext_holds_exactly_the_tables_its_graphs_read(runs: Any) -> None:
    """One table per captured size, with the values the cache made for it; eager decodes add
    none; graph set-up said what it did."""
    run = runs["aiter-ext"]
    assert len(run["held"]) == len(run["capture_bs"])
    for bs, (splits, table) in zip(run["capture_bs"], run["held"], strict=True):
        assert table == list(range(0, (bs + 1) * splits, splits)), (bs, table)
    state, detail = run["statuses"]["mla-split-table"]
    assert state == "applied"
    assert "caches at most 128 split tables" in detail
    assert "aiter#4587" in detail


@pytest.mark.slow
def test_upstream_is_left_alone(runs: Any) -> None:
    assert runs["upstream"]["held"] is None
    assert runs["upstream"]["statuses"] == {}


# ------------------------------------------------------------- the decision, by aiter's lookup


def _kernel_with(lookup: Any) -> Any:
    """A copy of the double's ``mla_decode_fwd`` whose ``get_meta_param`` is ``lookup``."""
    return rebound(aiter_mla.mla_decode_fwd, {"get_meta_param": lookup})


def _fresh_table(*key: Any) -> tuple[int, torch.Tensor]:
    return 1, torch.arange(int(key[1]) + 1, dtype=torch.int32)


@pytest.mark.parametrize(("lookup", "state", "says"), [
    (aiter_mla.get_meta_param, FixState.APPLIED, "caches at most 128 split tables"),
    (_fresh_table, FixState.NOT_NEEDED, "builds a new split table at each call"),
    (functools.cache(_fresh_table), FixState.NOT_NEEDED, "keeps every split table"),
], ids=["lru-cache", "per-call", "unbounded-cache"])
def test_the_decision_follows_what_aiters_lookup_does(
    lookup: Any, state: FixState, says: str
) -> None:
    got, detail = split_tables.decide(_kernel_with(lookup))
    assert got is state, detail
    assert says in detail


def test_a_kernel_that_looks_up_no_table_needs_nothing() -> None:
    def mla_decode_fwd(*args: Any, **kwargs: Any) -> None:
        return None

    state, detail = split_tables.decide(mla_decode_fwd)
    assert state is FixState.NOT_NEEDED
    assert "looks up no cached split table" in detail


def test_without_aiters_mla_decode_there_is_nothing_to_hold() -> None:
    assert split_tables.decide(None)[0] is FixState.SKIPPED


def test_a_kernel_that_is_no_plain_function_fails_and_names_the_risk() -> None:
    state, detail = split_tables.decide(functools.partial(aiter_mla.mla_decode_fwd))
    assert state is FixState.FAILED
    assert "aiter#4587" in detail
    assert "partial" in detail


def _call(kernel: Any, **kwargs: Any) -> None:
    kernel(torch.zeros(1, 16, 8), torch.randn(4, 1, 1, 8), torch.empty(1, 16, 4),
           torch.tensor([0, 1], dtype=torch.int32), torch.tensor([0, 3], dtype=torch.int32),
           torch.tensor([0, 1, 2]), None, 1, **kwargs)


def test_the_keeper_holds_what_captured_calls_looked_up_and_nothing_else() -> None:
    """Captured calls that let aiter pick a table: held, once per table; eager calls, and calls
    handed sglang's own table or persistent work metadata: nothing held."""
    aiter_mla.get_meta_param.cache_clear()
    keeper = split_tables.SplitTableKeeper(aiter_mla.mla_decode_fwd)
    _call(keeper.kernel)  # eager (a warm-up): the cache makes the entry
    assert keeper.held == {}
    with aiter_mla.capture():
        _call(keeper.kernel)
        _call(keeper.kernel)  # the same key: the same table
        _call(keeper.kernel, num_kv_splits=2,
              num_kv_splits_indptr=torch.tensor([0, 2], dtype=torch.int32))
        _call(keeper.kernel, work_meta_data=torch.zeros(1))
    (held,) = keeper.held.values()
    assert held is aiter_mla.get_meta_param(None, 1, 3, 16, 1, torch.float32)
