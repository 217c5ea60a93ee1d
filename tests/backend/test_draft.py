"""The multi-step draft backend: its shared ``kv_indptr`` and its children, at a padded batch."""

from __future__ import annotations

from typing import Any

import pytest

from sglang_aiter_plugin.backend.pool import PoolFrozenError
from testkit.plugin_state import pool_frozen
from testkit.sglang_setup import POOL, Setup

STEPS = 3


def _build(kind: str, setup: Setup, topk: int) -> Any:
    from sglang.srt.layers.attention.aiter_backend import AiterMultiStepDraftBackend

    from sglang_aiter_plugin.backend.classes import AiterExtMultiStepDraftBackend

    cls = AiterExtMultiStepDraftBackend if kind == "aiter-ext" else AiterMultiStepDraftBackend
    draft = cls(setup.runner, topk, STEPS)
    draft.init_cuda_graph_state(setup.max_bs, setup.max_bs)
    return draft


def _rows_alias_the_wrapper(draft: Any, max_bs: int, topk: int) -> list[str]:
    wrong = []
    for step, child in enumerate(draft.attn_backends):
        row = draft.kv_indptr[step]
        if child.kv_indptr.data_ptr() != row.data_ptr() or child.kv_indptr.shape != row.shape:
            wrong.append(f"child {step}")
    return wrong


UPSTREAM = pytest.mark.xfail(strict=True, reason="upstream never grows the draft kv_indptr")


@pytest.mark.parametrize("sglang_setup", ["two-batch-overlap"], indirect=True)
@pytest.mark.parametrize("kind", ["aiter-ext", pytest.param("upstream", marks=UPSTREAM)])
@pytest.mark.parametrize("topk", [1, 2])
def test_shared_kv_indptr_holds_every_padded_row(kind: str, topk: int, sglang_setup: Setup) -> None:
    max_bs = sglang_setup.max_bs
    assert max_bs > POOL
    draft = _build(kind, sglang_setup, topk)
    assert tuple(draft.kv_indptr.shape) == (STEPS, max_bs * topk + 1)


@pytest.mark.parametrize("sglang_setup", ["dp-attention"], indirect=True)
@pytest.mark.parametrize("kind", ["aiter-ext", pytest.param("upstream", marks=UPSTREAM)])
def test_children_keep_viewing_their_row_after_growth(kind: str, sglang_setup: Setup) -> None:
    draft = _build(kind, sglang_setup, topk=1)
    assert _rows_alias_the_wrapper(draft, sglang_setup.max_bs, 1) == []


@pytest.mark.parametrize("sglang_setup", ["two-batch-overlap"], indirect=True)
def test_children_are_pooled_backends_and_everything_freezes(sglang_setup: Setup) -> None:
    from sglang_aiter_plugin.backend.classes import AiterExtAttnBackend

    draft = _build("aiter-ext", sglang_setup, topk=2)
    assert len(draft.attn_backends) == STEPS - 1
    assert all(type(c) is AiterExtAttnBackend for c in draft.attn_backends)
    for child in draft.attn_backends:
        assert "kv_indptr" not in child.buffer_pool.names()  # lent by the wrapper
        assert child.kv_last_page_len.shape[0] == sglang_setup.max_bs
        assert pool_frozen(child.buffer_pool)
    with pytest.raises(PoolFrozenError, match="captured"):
        draft.init_cuda_graph_state(sglang_setup.max_bs + 2, sglang_setup.max_bs + 2)


@pytest.mark.parametrize("sglang_setup", ["two-batch-overlap"], indirect=True)
def test_the_module_global_is_untouched(sglang_setup: Setup) -> None:
    from sglang.srt.layers.attention import aiter_backend

    _build("aiter-ext", sglang_setup, topk=1)
    assert aiter_backend.AiterAttnBackend.__name__ == "AiterAttnBackend"
    upstream = _build("upstream", sglang_setup, topk=1)
    assert all(type(c) is aiter_backend.AiterAttnBackend for c in upstream.attn_backends)
