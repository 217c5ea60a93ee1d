"""Every bound the backend decides, at exactly its limit and one past it; every widened width
against the layout it widens from. Fast, on any release (a layout a release no longer has is put
back on upstream's set-up by the test)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from sglang_aiter_plugin.backend.bounds_check import BatchTooLargeError, install_bounds_check
from sglang_aiter_plugin.backend.pool import BufferPool, BufferSpec, Fill, PoolSizeError
from sglang_aiter_plugin.backend.widths import UnknownGraphLayoutError, widen
from testkit.sglang_setup import SCENARIOS, Setup, configure


class Holder:
    """A backend's metadata entry point (0.5.18+), recording the batch sizes that reach it."""

    def __init__(self) -> None:
        self.calls: list[int] = []

    def init_forward_metadata_out_graph(self, forward_batch: Any, in_capture: bool = False) -> None:
        self.calls.append(forward_batch.batch_size)


def _batch(bs: int, seq_lens_sum: int | None = None) -> SimpleNamespace:
    return SimpleNamespace(batch_size=bs, seq_lens=torch.ones(bs, dtype=torch.int64),
                           seq_lens_sum=seq_lens_sum)


# ---------------------------------------------------------------- the bounds check


def test_the_rows_bound_passes_its_capacity_and_refuses_one_more() -> None:
    h = Holder()
    install_bounds_check(h, 8)
    h.init_forward_metadata_out_graph(_batch(8))
    with pytest.raises(BatchTooLargeError, match=r"a batch of 9 rows, but .* at most 8"):
        h.init_forward_metadata_out_graph(_batch(9))
    assert h.calls == [8]


@pytest.mark.parametrize(("topk", "extra"), [(1, 0), (1, 3), (2, 1)])
def test_the_entries_bound_passes_a_full_buffer_and_refuses_one_entry_more(
        topk: int, extra: int) -> None:
    """need = seq_lens_sum x topk + rows x extra: at exactly the buffer's entries it passes."""
    room, bs = 101, 7  # odd, so that one entry past is reachable with topk 2 too
    h = Holder()
    h.cuda_graph_kv_indices = torch.zeros(room, dtype=torch.int32)  # type: ignore[attr-defined]
    h.topk = topk  # type: ignore[attr-defined]
    install_bounds_check(h, bs, extra_per_row=extra)
    full = (room - bs * extra) // topk
    assert full * topk + bs * extra == room  # the bound itself, not below it
    h.init_forward_metadata_out_graph(_batch(bs, full))
    past = full + 1
    with pytest.raises(BatchTooLargeError,
                       match=f"needs {past * topk + bs * extra} entries .* which holds {room}"):
        h.init_forward_metadata_out_graph(_batch(bs, past))
    assert h.calls == [bs]


def test_the_entries_bound_of_a_draft_step_is_its_row() -> None:
    h = Holder()
    h.cuda_graph_kv_indices = torch.zeros((3, 50), dtype=torch.int32)  # type: ignore[attr-defined]
    install_bounds_check(h, 5)
    h.init_forward_metadata_out_graph(_batch(5, 50))
    with pytest.raises(BatchTooLargeError, match=r"needs 51 entries .* holds 50 per draft step"):
        h.init_forward_metadata_out_graph(_batch(5, 51))


# ---------------------------------------------------------------- the pool


def _pool(capacity: int) -> tuple[SimpleNamespace, BufferPool]:
    owner = SimpleNamespace()
    specs = [BufferSpec("kv_indptr", torch.int32, Fill.ZEROS, extra=1),
             BufferSpec("kv_last_page_len", torch.int32, Fill.ONES),
             BufferSpec("draft", torch.int32, Fill.ZEROS, per_row=2, extra=1, leading=(3,))]
    return owner, BufferPool(owner, specs, capacity, "cpu")


def test_the_pool_holds_one_row_and_refuses_none() -> None:
    owner, pool = _pool(1)
    assert tuple(owner.kv_indptr.shape) == (2,)
    assert tuple(owner.kv_last_page_len.shape) == (1,)
    assert tuple(owner.draft.shape) == (3, 3)
    with pytest.raises(PoolSizeError, match="at least 1 row, got 0"):
        _pool(0)
    with pytest.raises(PoolSizeError, match="for 0 rows"):
        pool.grow(0, "test")


def test_the_pool_grows_for_one_row_more_than_it_holds_not_for_its_capacity() -> None:
    owner, pool = _pool(8)
    before = owner.kv_indptr
    assert pool.grow(8, "test") is False
    assert owner.kv_indptr is before
    assert pool.grow(9, "test") is True
    assert tuple(owner.kv_indptr.shape) == (10,)  # an indptr: one entry beyond the rows
    assert tuple(owner.kv_last_page_len.shape) == (9,)
    assert tuple(owner.draft.shape) == (3, 9 * 2 + 1)
    assert owner.kv_last_page_len.tolist() == [1] * 9  # the fill kept


# ---------------------------------------------------------------- widening


def test_a_buffer_that_holds_what_is_needed_is_not_widened() -> None:
    owner = SimpleNamespace(buf=torch.ones(40, dtype=torch.int32))
    assert widen(owner, "buf", 40, known={}) is False
    assert owner.buf.numel() == 40


@pytest.mark.parametrize("multiple_of", [1, 4, 7])
def test_one_entry_short_of_a_known_layout_is_widened_to_whole_multiples(
        multiple_of: int) -> None:
    owner = SimpleNamespace(buf=torch.ones(39, dtype=torch.int32))
    assert widen(owner, "buf", 40, known={39: "a layout"}, multiple_of=multiple_of) is True
    size = owner.buf.numel()
    assert size >= 40
    assert size % multiple_of == 0
    assert size - 40 < multiple_of
    assert owner.buf.dtype == torch.int32
    assert int(owner.buf.abs().sum()) == 0


def test_each_draft_steps_row_is_widened_alone() -> None:
    owner = SimpleNamespace(buf=torch.ones((3, 39), dtype=torch.int32))
    assert widen(owner, "buf", 40, known={39: "a layout"}, multiple_of=8, leading=(3,))
    assert tuple(owner.buf.shape) == (3, 40)


def test_one_entry_short_of_an_unknown_layout_stops_by_name() -> None:
    class Upstream:
        __module__ = "sglang.srt.layers.attention.aiter_backend"

    class Owner(Upstream):
        __module__ = "tests"

    owner = Owner()
    owner.buf = torch.ones(38, dtype=torch.int32)  # type: ignore[attr-defined]
    with pytest.raises(UnknownGraphLayoutError, match="buf with 38 entries, fewer than the 40"):
        widen(owner, "buf", 40, known={39: "a layout"})


@pytest.fixture
def page_16(model_dir: Any) -> Any:
    setup = configure(model_dir, SCENARIOS["two-batch-overlap"], ("--page-size", "16"))
    with setup.scope:
        yield setup


def test_kv_indices_in_the_per_page_layout_is_widened_to_every_token_of_every_page(
        page_16: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    """0.5.11-0.5.12.post1 allocate ``cuda_graph_kv_indices`` one entry per page (put back here on
    any release): graph set-up widens it to one entry per token of every whole page, for every
    graph row, and a row of the unified page table's view holds a whole context."""
    from sglang.srt.layers.attention.aiter_backend import AiterAttnBackend

    from sglang_aiter_plugin.backend.classes import AiterExtAttnBackend

    upstream = AiterAttnBackend.init_cuda_graph_state

    def per_page(self: Any, max_bs: int, *args: Any, **kw: Any) -> None:
        upstream(self, max_bs, *args, **kw)
        blocks = -(-int(self.max_context_len) // int(self.page_size))
        self.cuda_graph_kv_indices = torch.zeros(max_bs * blocks, dtype=torch.int32)

    monkeypatch.setattr(AiterAttnBackend, "init_cuda_graph_state", per_page)
    backend = AiterExtAttnBackend(page_16.runner)
    bs = page_16.max_bs
    backend.init_cuda_graph_state(bs, bs)
    context, page = int(backend.max_context_len), int(backend.page_size)
    assert page == 16
    blocks = -(-context // page)
    assert backend.cuda_graph_kv_indices.numel() == bs * blocks * page
    assert backend.cuda_graph_kv_indices.numel() // blocks * blocks == (
        backend.cuda_graph_kv_indices.numel())  # viewable as rows of whole pages
    (status,) = [s for s in backend.graph_fixes if s.name == "kv-indices-per-page"]
    assert (status.state.value, status.detail) == (
        "applied", f"cuda_graph_kv_indices widened to {bs * blocks * page} entries")
