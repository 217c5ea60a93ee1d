"""BufferPool on its own: fills, growth, re-pointing (by the pool itself), observers, freezing."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from sglang_aiter_plugin.backend.pool import BufferPool, BufferSpec, Fill, PoolFrozenError
from sglang_aiter_plugin.plugin import hookimpl
from sglang_aiter_plugin.plugin.spec import PoolResize
from testkit.plugins import use_manager

SPECS = [
    BufferSpec("kv_indptr", torch.int32, Fill.ZEROS, extra=1),
    BufferSpec("kv_last_page_len", torch.int32, Fill.ONES),
    BufferSpec("unified", torch.int32, Fill.ARANGE, extra=1),
    BufferSpec("mask_indptr", torch.int64, Fill.ZEROS, extra=1),
    BufferSpec("workspace", torch.uint8, Fill.UNINITIALISED, per_row=40),
]


class Recorder:
    def __init__(self) -> None:
        self.events: list[PoolResize] = []
        self.saw_repointed: list[bool] = []

    @hookimpl
    def aiter_ext_pool_resized(self, event: PoolResize) -> None:
        self.events.append(event)
        holder = event.owner
        self.saw_repointed.append(holder.kv_indptr is event.pool.tensor("kv_indptr"))


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    rec = Recorder()
    use_manager(monkeypatch, [("recorder", rec)])
    return rec


def make_pool(capacity: int = 3) -> tuple[BufferPool, SimpleNamespace, SimpleNamespace]:
    owner = SimpleNamespace()
    updater = SimpleNamespace()
    pool = BufferPool(owner, SPECS, capacity, "cpu")
    for spec in SPECS:
        pool.bind(owner, spec.name, spec.name)
    pool.bind(updater, "kv_indptr", "kv_indptr")
    return pool, owner, updater


def test_buffers_are_sized_in_rows_with_their_fill_and_dtype() -> None:
    _pool, owner, _ = make_pool(3)
    assert owner.kv_indptr.tolist() == [0, 0, 0, 0]
    assert owner.kv_last_page_len.tolist() == [1, 1, 1]
    assert owner.unified.tolist() == [0, 1, 2, 3]
    assert owner.mask_indptr.dtype == torch.int64
    assert owner.workspace.numel() == 3 * 40


def test_growth_reallocates_every_buffer_and_repoints_every_holder(recorder: Recorder) -> None:
    pool, owner, updater = make_pool(3)
    old = owner.kv_indptr
    assert pool.grow(5, reason="test") is True
    assert pool.capacity == 5
    assert owner.kv_indptr is not old
    assert owner.kv_indptr.shape == (6,)
    assert updater.kv_indptr is owner.kv_indptr
    assert owner.kv_last_page_len.tolist() == [1] * 5
    assert owner.unified.tolist() == list(range(6))
    assert owner.workspace.numel() == 5 * 40
    assert pool.stale_bindings() == []


def test_growth_is_announced_once_with_old_new_and_reason_after_the_pool_repointed(
    recorder: Recorder,
) -> None:
    pool, owner, _ = make_pool(3)
    pool.grow(7, reason="init_cuda_graph_state(max_bs=7)")
    pool.grow(7, reason="same size again")
    pool.grow(4, reason="smaller")
    assert [(e.old_capacity, e.new_capacity, e.reason) for e in recorder.events] == [
        (3, 7, "init_cuda_graph_state(max_bs=7)")
    ]
    assert recorder.events[0].pool is pool
    assert recorder.events[0].owner is owner
    assert recorder.saw_repointed == [True]  # observers see a pool that is already right


def test_frozen_pool_refuses_to_grow_and_says_why(recorder: Recorder) -> None:
    pool, owner, _ = make_pool(3)
    pool.freeze("CUDA graphs were captured against the current buffers")
    before = owner.kv_indptr
    assert pool.grow(3, reason="no growth needed") is False
    with pytest.raises(PoolFrozenError) as exc:
        pool.grow(4, reason="a larger graph")
    message = str(exc.value)
    assert "from 3 to 4 rows" in message
    assert "captured" in message
    assert "freed memory" in message
    assert owner.kv_indptr is before
    assert recorder.events == []


def test_rows_of_a_leading_dimension_are_bound_as_views(recorder: Recorder) -> None:
    owner = SimpleNamespace()
    children = [SimpleNamespace(), SimpleNamespace()]
    spec = BufferSpec("kv_indptr", torch.int32, Fill.ZEROS, per_row=2, extra=1, leading=(3,))
    pool = BufferPool(owner, [spec], 4, "cpu")
    pool.bind(owner, "kv_indptr", "kv_indptr")
    for i, child in enumerate(children):
        pool.bind(child, "kv_indptr", "kv_indptr", row=i)
    pool.grow(6, reason="draft")
    assert owner.kv_indptr.shape == (3, 13)
    for i, child in enumerate(children):
        assert child.kv_indptr.data_ptr() == owner.kv_indptr[i].data_ptr()
        assert child.kv_indptr.shape == (13,)


def test_growth_keeps_every_holder_right_with_no_plugin_manager_at_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    use_manager(monkeypatch, builtin=False)  # no fixes, no observers registered
    pool, owner, updater = make_pool(3)
    assert pool.grow(5, reason="test")
    assert pool.stale_bindings() == []
    assert owner.kv_indptr.shape == (6,)
    assert updater.kv_indptr is owner.kv_indptr


def test_an_observer_that_raises_is_logged_and_the_pool_is_already_right(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    class Raising:
        @hookimpl
        def aiter_ext_pool_resized(self, event: PoolResize) -> None:
            raise RuntimeError("observer failed")

    use_manager(monkeypatch, [("raising", Raising())])
    pool, _, _ = make_pool(3)
    assert pool.grow(4, reason="test")
    assert pool.capacity == 4
    assert pool.stale_bindings() == []
    assert "an aiter_ext_pool_resized observer raised" in caplog.text
    assert "observer failed" in caplog.text


def test_before_the_plugin_registered_growth_needs_no_manager(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sglang_aiter_plugin.plugin import manager as manager_module

    monkeypatch.setattr(manager_module, "current_manager", lambda: None)
    pool, owner, _ = make_pool(3)
    assert pool.grow(4, reason="test")
    assert owner.kv_indptr.shape == (5,)


def test_adopts_tensors_that_fit_and_replaces_those_that_do_not() -> None:
    fits = torch.zeros(4, dtype=torch.int32)
    wrong_dtype = torch.zeros(4, dtype=torch.int64)
    pool = BufferPool(
        SimpleNamespace(),
        [*SPECS[:1], BufferSpec("qo", torch.int32, Fill.ZEROS, extra=1)],
        3,
        "cpu",
        adopt={"kv_indptr": fits, "qo": wrong_dtype},
    )
    assert pool.tensor("kv_indptr") is fits
    assert pool.tensor("qo").dtype == torch.int32


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="at least 1 row"):
        BufferPool(SimpleNamespace(), SPECS, 0, "cpu")
    with pytest.raises(ValueError, match="described twice"):
        BufferPool(SimpleNamespace(), SPECS + SPECS[:1], 2, "cpu")
    with pytest.raises(ValueError, match="no spec"):
        BufferPool(SimpleNamespace(), SPECS, 2, "cpu", adopt={"nope": torch.zeros(1)})
    pool, _, _ = make_pool()
    with pytest.raises(KeyError, match="owns no buffer 'nope'"):
        pool.tensor("nope")
    before = {n: pool.tensor(n) for n in pool.names()}
    for size in (0, -4):
        with pytest.raises(ValueError, match=f"for {size} rows \\(test\\); .* at least 1"):
            pool.grow(size, reason="test")
    assert pool.capacity == 3
    for name, tensor in before.items():
        assert pool.tensor(name) is tensor
