"""The plugin on sglang's next release: each in-flight change to upstream's AITER backend applied
to the installed release as its pull request describes it (``testkit.upstream_next``).

On each, ``aiter-ext`` must stay right on the batches and graphs of the other backend tests,
report what it did (``not needed`` where upstream now does the job, ``applied`` only for work it
does) and neither do upstream's work a second time nor add anything to the per-step path.
"""

from __future__ import annotations

import contextlib
import importlib
from typing import Any

import pytest
import torch

from sglang_aiter_plugin._status import FixState
from testkit.plugin_state import fills_page_table
from testkit.sglang_setup import POOL, Setup
from testkit.subproc import run_python
from testkit.upstream_next import (
    metadata_reads_more_of_the_batch,
    unified_page_table_filled,
    workspace_helper,
)

METADATA = ("init_forward_metadata_capture_cuda_graph", "init_forward_metadata_replay_cuda_graph",
            "init_forward_metadata_out_graph")


def _states(backend: Any) -> dict[str, FixState]:
    return {s.name: s.state for s in backend.graph_fixes}


def _wrong_rows_after_replay(backend: Any, setup: Setup, bs: int) -> list[int]:
    """Capture then replay a decode graph batch of ``bs`` rows (request slot ``i``, ``5 + i``
    tokens, the KV locations of ``tests.compat.buffer_widths._fill_table``); the rows whose
    indices, as the kernel is handed them, differ from their ``req_to_token`` row."""
    from sglang_aiter_plugin.selftest.decode_batch import DecodeBatch
    from tests.compat.buffer_widths import _fill_table

    table = _fill_table(setup.runner)
    batch = DecodeBatch(backend, bs, "cpu")
    q = torch.zeros(bs, backend.num_head * backend.head_dim)
    batch.set(list(range(bs)), [1] * bs, q)
    batch.metadata(in_capture=True)
    lens = [5 + i for i in range(bs)]
    batch.set(list(range(bs)), lens, q)
    batch.metadata(in_capture=False)
    md = backend.forward_metadata
    if md.kv_indptr is None:  # unified decode: a page table, one row per request
        rows = md.kv_indices.reshape(-1, md.kv_indices.shape[-1])
        got = [rows[i, :n] for i, n in enumerate(lens)]
    else:
        got = [md.kv_indices[int(md.kv_indptr[i]):int(md.kv_indptr[i + 1])] for i in range(bs)]
    return [i for i, n in enumerate(lens) if not torch.equal(got[i].long(), table[i, :n].long())]


# ---------------------------------------------------------------- sglang#40410, sglang#34833


@pytest.mark.parametrize("sglang_setup", ["two-batch-overlap"], indirect=True)
@pytest.mark.parametrize("upstream_fills", [False, True], ids=["today", "sglang#40410"])
def test_the_unified_page_table_is_filled_once_by_whoever_upstream_leaves_it_to(
    sglang_setup: Setup, upstream_fills: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglang_aiter_plugin.backend.classes import AiterExtAttnBackend

    monkeypatch.setenv("SGLANG_USE_AITER_UNIFIED_ATTN", "1")
    bs = sglang_setup.max_bs
    change: contextlib.AbstractContextManager[list[int]] = (
        unified_page_table_filled() if upstream_fills else contextlib.nullcontext([]))
    with change as filled:
        backend = AiterExtAttnBackend(sglang_setup.runner)
        backend.init_cuda_graph_state(bs, bs)
        set_up_fills = list(filled)
        assert _wrong_rows_after_replay(backend, sglang_setup, bs) == []  # right either way
    if upstream_fills:
        assert not fills_page_table(backend)  # the plugin's fill is neither installed
        assert [n for n in METADATA if n in vars(backend)] == []  # nor anything per step
        assert filled[len(set_up_fills):] == [bs, bs]  # capture and replay, by upstream alone
    else:
        assert fills_page_table(backend)
    state = _states(backend)["unified-page-table"]
    assert state is (FixState.NOT_NEEDED if upstream_fills else FixState.APPLIED)
    assert "unified-page-table=" + state.value in _log_line(backend)


def _log_line(backend: Any) -> str:
    return "; ".join(map(str, backend.graph_fixes))


@pytest.mark.parametrize("sglang_setup", ["two-batch-overlap"], indirect=True)
def test_a_page_table_probe_that_cannot_decide_fills_the_table_and_says_so(
    sglang_setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A release whose graph metadata reads more of the batch than the probe's stand-in has:
    graph set-up goes on, takes the safe side (the plugin fills the table) and says why."""
    from sglang_aiter_plugin.backend.classes import AiterExtAttnBackend

    monkeypatch.setenv("SGLANG_USE_AITER_UNIFIED_ATTN", "1")
    bs = sglang_setup.max_bs
    with metadata_reads_more_of_the_batch() as method:
        backend = AiterExtAttnBackend(sglang_setup.runner)
        backend.init_cuda_graph_state(bs, bs)  # does not raise
        assert fills_page_table(backend)
        (status,) = [s for s in backend.graph_fixes if s.name == "unified-page-table"]
    assert status.state is FixState.APPLIED
    assert status.detail.startswith(
        "the page table is filled after upstream's graph metadata (whether upstream fills it is "
        f"unknown: upstream's {method} raised on a one-row decode batch: ")
    assert "num_token_non_padded" in status.detail
    assert str(status) in _log_line(backend)
    table = getattr(backend, "cuda_graph_page_table", None)
    if table is None:
        table = backend.cuda_graph_kv_indices.view(-1, int(backend.max_context_len))
    assert int(table[0, 0]) != -1  # the probe's mark is taken back


# ---------------------------------------------------------------- sglang#36563


@pytest.mark.parametrize("sglang_setup", ["two-batch-overlap"], indirect=True)
@pytest.mark.parametrize("partition", [256, 512], ids=["sglang#36563", "a-later-formula"])
def test_the_workspace_is_sized_with_sglangs_own_helper(
    sglang_setup: Setup, partition: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sglang's KV budget charges what its helper says; the pool takes the same number per row
    (never its own formula) and reports the bytes it holds beyond upstream's allocation."""
    from sglang.srt.layers.attention.aiter_backend import AiterAttnBackend

    from sglang_aiter_plugin.backend.buffers import discover
    from sglang_aiter_plugin.backend.classes import AiterExtAttnBackend
    from testkit.upstream_next import WORKSPACE_MODULE

    monkeypatch.setenv("SGLANG_USE_AITER_UNIFIED_ATTN", "0")
    with workspace_helper(partition) as calls:
        helper = importlib.import_module(WORKSPACE_MODULE).aiter_attn_workspace_bytes
        stock = AiterAttnBackend(sglang_setup.runner)
        backend = AiterExtAttnBackend(sglang_setup.runner)
        backend.init_cuda_graph_state(sglang_setup.max_bs, sglang_setup.max_bs)
        asked = list(calls)

    def size(rows: int) -> int:
        return int(helper(max_num_reqs=rows, num_head=stock.num_head, head_dim=stock.head_dim,
                          context_len=stock.max_context_len))

    assert stock.workspace_buffer.numel() == size(POOL)  # what sglang allocates and charges
    assert backend.buffer_pool.capacity == sglang_setup.max_bs > POOL
    assert backend.workspace_buffer.numel() == size(sglang_setup.max_bs)
    assert 1 in asked  # the plugin asked sglang's helper, for one row
    beyond = sum(getattr(backend, s.name).nbytes for s in discover(stock, POOL)) - sum(
        getattr(stock, s.name).nbytes for s in discover(stock, POOL))
    (rows,) = [s for s in backend.graph_fixes if s.name == "rows"]
    assert rows.state is FixState.APPLIED
    assert "workspace_buffer" in rows.detail
    assert f"{beyond:,} bytes beyond upstream's own allocation" in rows.detail


@pytest.mark.parametrize("sglang_setup", ["plain"], indirect=True)
def test_a_workspace_helper_that_takes_other_arguments_stops_construction_by_name(
    sglang_setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Should the helper be merged with another signature, ``aiter-ext`` says so and what to do,
    rather than size the workspace by a formula sglang no longer charges."""
    import sys
    import types

    from sglang_aiter_plugin.backend.buffers import UnknownBatchBufferError
    from sglang_aiter_plugin.backend.classes import AiterExtAttnBackend
    from testkit.upstream_next import WORKSPACE_MODULE

    module = types.ModuleType(WORKSPACE_MODULE)
    module.aiter_attn_workspace_bytes = lambda *, rows, config: 0  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, WORKSPACE_MODULE, module)
    monkeypatch.setenv("SGLANG_USE_AITER_UNIFIED_ATTN", "0")
    with pytest.raises(UnknownBatchBufferError) as info:
        AiterExtAttnBackend(sglang_setup.runner)
    text = str(info.value)
    assert f"{WORKSPACE_MODULE}.aiter_attn_workspace_bytes changed" in text
    assert "unexpected keyword argument" in text
    assert "--attention-backend aiter" in text


# ---------------------------------------------------------------- sglang#28763, sglang#28764

STATIC = """
import torch
from testkit.batch_paths import SCENARIOS, check_metadata, graph_max
from sglang_aiter_plugin.selftest.decode_batch import draft_metadata
from sglang_aiter_plugin.selftest.mlp_sync import mlp_synced, plain_batch
from testkit.batches import draft_batch
from testkit.plugin_state import fills_page_table, pool_frozen
from testkit.sglang_setup import configure, write_model_dir
from testkit.upstream_next import init_backends, static_metadata_buffers
from tests.backend.test_upstream_next import _wrong_rows_after_replay
from pathlib import Path
import os, tempfile

model = write_model_dir(Path(tempfile.mkdtemp()) / 'm')
out = {}
for path in ('ragged', 'unified'):
    os.environ['SGLANG_USE_AITER_UNIFIED_ATTN'] = '1' if path == 'unified' else '0'
    setup = configure(model, SCENARIOS['dp-attention'], ())
    with setup.scope, static_metadata_buffers() as renamed:
        from sglang.srt.layers.attention.aiter_backend import AiterAttnBackend
        from sglang_aiter_plugin.backend.classes import (
            AiterExtAttnBackend, AiterExtMultiStepDraftBackend)
        upstream = AiterAttnBackend.init_static_metadata_buffers
        old_name = hasattr(AiterAttnBackend, 'init_cuda_graph_state')
        ran = []
        def counted(self, *a, **kw):
            ran.append(type(self).__name__)
            return upstream(self, *a, **kw)
        AiterAttnBackend.init_static_metadata_buffers = counted
        try:
            backend = AiterExtAttnBackend(setup.runner)
            built = backend.buffer_pool.capacity
            top = init_backends(backend, setup)
            ran_once = list(ran)
            bs = graph_max(setup)
            frozen = pool_frozen(backend.buffer_pool)
            reason = backend.buffer_pool._frozen
            wrong = _wrong_rows_after_replay(backend, setup, bs)
            eager = mlp_synced(setup, backend, plain_batch(setup.runner.req_to_token_pool.size),
                               [setup.runner.req_to_token_pool.size])
            error, wrong_eager = check_metadata(backend, eager, path)
            draft = AiterExtMultiStepDraftBackend(setup.runner, 1, 3)
            try:
                init_backends(draft, setup)
                draft_metadata(draft, draft_batch(setup.runner, bs, 'cpu'))
                draft_error = None
            except Exception as exc:
                draft_error = f'{type(exc).__name__}: {exc}'
        finally:
            AiterAttnBackend.init_static_metadata_buffers = upstream
    out[path] = dict(
        renamed=renamed, old_name=old_name,
        built=built, top=top, graph=bs, capacity=backend.buffer_pool.capacity,
        frozen=frozen, reason=reason, upstream_ran=ran_once, draft_children_ran=ran[1:],
        fixes={s.name: [s.state.value, s.detail] for s in getattr(backend, 'graph_fixes', ())},
        fills=fills_page_table(backend), wrong_rows=wrong, eager_batch=int(eager.batch_size),
        eager_error=error, eager_wrong=wrong_eager,
        draft_error=draft_error, draft_frozen=pool_frozen(draft.buffer_pool),
        draft_children_frozen=[pool_frozen(c.buffer_pool) for c in draft.attn_backends],
        draft_stale=draft.buffer_pool.stale_bindings(),
        draft_fixes={s.name: s.state.value for s in getattr(draft, 'graph_fixes', ())})
print('RESULT ' + json.dumps(out))
"""


@pytest.fixture(scope="module")
def static_buffers() -> dict[str, Any]:
    """Both decode paths under DP attention (eager batches and graphs above P), with the static
    buffers set up at eager init and never by a graph runner; one fresh interpreter."""
    result = run_python(STATIC, env={"TRITON_INTERPRET": "1"}, timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    data: dict[str, Any] = result.data
    return data


@pytest.mark.slow
@pytest.mark.parametrize("path", ["ragged", "unified"])
def test_static_buffers_set_up_at_eager_init_keep_the_pool_right(
    path: str, static_buffers: dict[str, Any]
) -> None:
    got = static_buffers[path]
    assert "AiterAttnBackend" in got["renamed"]  # the rename is real
    assert not got["old_name"]
    assert got["top"] >= got["graph"] > POOL  # both paths pad
    assert got["eager_batch"] > POOL
    # the pool was sized at construction for the largest batch: the set-up grew nothing
    assert got["built"] == got["capacity"] >= got["top"]
    assert got["upstream_ran"] == ["AiterExtAttnBackend"]  # upstream's set-up, once
    assert got["wrong_rows"] == []  # graph replay hands the kernel every row right
    assert got["eager_error"] is None
    assert got["eager_wrong"] == []
    assert got["frozen"]
    assert "init_static_metadata_buffers" in got["reason"], got["reason"]
    assert got["fixes"]["rows"][0] == "applied", got["fixes"]
    if path == "unified":
        assert got["fixes"]["unified-page-table"][0] == "applied"
        assert got["fills"]
    assert got["draft_error"] is None
    assert got["draft_frozen"]
    assert all(got["draft_children_frozen"])
    assert got["draft_stale"] == []
    assert got["draft_children_ran"] == ["AiterExtAttnBackend"] * 2  # each child's, once
    assert set(got["draft_fixes"]) == {"draft-kv-indptr", "draft-kv-indices-steps"}


def test_the_simulated_changes_leave_sglang_as_it_was() -> None:
    """Each simulation puts sglang's classes and modules back (other tests run after it)."""
    import sys

    from sglang.srt.layers.attention import aiter_backend, base_attn_backend
    from sglang.srt.server_args import ServerArgs

    from testkit import upstream_next

    def snapshot() -> list[Any]:
        return [dict(vars(aiter_backend.AiterAttnBackend)),
                dict(vars(aiter_backend.AiterMultiStepDraftBackend)),
                dict(vars(base_attn_backend.AttentionBackend)), dict(vars(ServerArgs)),
                vars(ServerArgs)["__post_init__"].__code__,
                upstream_next.WORKSPACE_MODULE in sys.modules]

    before = snapshot()
    for change in (upstream_next.unified_page_table_filled, upstream_next.workspace_helper,
                   upstream_next.static_metadata_buffers,
                   upstream_next.plugins_loaded_in_post_init):
        with change():
            assert snapshot() != before, change.__name__
        assert snapshot() == before, change.__name__
