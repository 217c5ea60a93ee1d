"""BufferPool on its own: fills, growth, re-pointing (by the pool itself), freezing."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from sglang_aiter_plugin.backend import pool as pool_module
from sglang_aiter_plugin.backend.pool import BufferPool, BufferSpec, Fill, PoolFrozenError

SPECS = [
    BufferSpec("kv_indptr", torch.int32, Fill.ZEROS, extra=1),
    BufferSpec("kv_last_page_len", torch.int32, Fill.ONES),
    BufferSpec("unified", torch.int32, Fill.ARANGE, extra=1),
    BufferSpec("mask_indptr", torch.int64, Fill.ZEROS, extra=1),
    BufferSpec("workspace", torch.uint8, Fill.UNINITIALISED, per_row=40),
]


def make_pool(capacity: int = 3) -> tuple[BufferPool, SimpleNamespace, SimpleNamespace]:
    owner = SimpleNamespace()
    updater = SimpleNamespace()
    pool = BufferPool(owner, SPECS, capacity, "cpu")
    pool.bind(updater, "kv_indptr", "kv_indptr")
    return pool, owner, updater


def test_buffers_are_sized_in_rows_with_their_fill_and_dtype() -> None:
    _pool, owner, _ = make_pool(3)
    assert owner.kv_indptr.tolist() == [0, 0, 0, 0]
    assert owner.kv_last_page_len.tolist() == [1, 1, 1]
    assert owner.unified.tolist() == [0, 1, 2, 3]
    assert owner.mask_indptr.dtype == torch.int64
    assert owner.workspace.numel() == 3 * 40


def test_growth_reallocates_every_buffer_and_repoints_every_holder() -> None:
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


def test_the_pool_knows_nothing_of_the_plugin_layer() -> None:
    """The pool imports nothing above itself: no registry, no backend."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(pool_module.__file__ or "").read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert {m for m in imported if m and m.startswith("sglang_aiter_plugin")} == {
        "sglang_aiter_plugin._errors"
    }


def test_frozen_pool_refuses_to_grow_and_says_why() -> None:
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
    assert pool.capacity == 3


def test_rows_of_a_leading_dimension_are_bound_as_views() -> None:
    owner = SimpleNamespace()
    children = [SimpleNamespace(), SimpleNamespace()]
    spec = BufferSpec("kv_indptr", torch.int32, Fill.ZEROS, per_row=2, extra=1, leading=(3,))
    pool = BufferPool(owner, [spec], 4, "cpu")
    for i, child in enumerate(children):
        pool.bind(child, "kv_indptr", "kv_indptr", row=i)
    pool.grow(6, reason="draft")
    assert owner.kv_indptr.shape == (3, 13)
    for i, child in enumerate(children):
        assert child.kv_indptr.data_ptr() == owner.kv_indptr[i].data_ptr()
        assert child.kv_indptr.shape == (13,)


def test_adopts_the_owners_tensors_that_fit_and_replaces_those_that_do_not() -> None:
    fits = torch.zeros(4, dtype=torch.int32)
    wrong_dtype = torch.zeros(4, dtype=torch.int64)
    owner = SimpleNamespace(kv_indptr=fits, qo=wrong_dtype)
    pool = BufferPool(
        owner, [*SPECS[:1], BufferSpec("qo", torch.int32, Fill.ZEROS, extra=1)], 3, "cpu"
    )
    assert pool.tensor("kv_indptr") is fits
    assert pool.tensor("qo").dtype == torch.int32
    assert owner.qo is pool.tensor("qo")
    assert pool.reallocated == ("qo",)


def test_bad_input_is_named() -> None:
    with pytest.raises(ValueError, match="at least 1 row"):
        BufferPool(SimpleNamespace(), SPECS, 0, "cpu")
    with pytest.raises(ValueError, match="described twice"):
        BufferPool(SimpleNamespace(), SPECS + SPECS[:1], 2, "cpu")
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
