"""After ``init_cuda_graph_state(max_bs > P)``: sizes, holders, fills, dtypes, freezing.

Built through sglang's real configuration (two-batch overlap, DP attention) against the real
``AiterAttnBackend`` code. Every check also runs against upstream ``AiterAttnBackend``; the checks
upstream fails at a padded batch are strict expected failures, so the gap stays visible.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

from sglang_aiter_plugin.backend.buffers import discover, workspace_bytes_per_row
from sglang_aiter_plugin.backend.pool import PoolFrozenError
from testkit.plugin_state import pool_frozen
from testkit.sglang_setup import POOL, Setup

PADDED = ["two-batch-overlap", "dp-attention"]
DECODE_PATHS = ["ragged", "unified"]
UPSTREAM_GAPS = {"rows", "holders", "fills"}
"""Checks upstream fails once max_bs > P. ``frozen`` runs for aiter-ext only: upstream has no pool
to freeze, so that check could never pass there and would say nothing about it."""

ExpectedDtypes = {
    "kv_indptr": torch.int32,
    "qo_indptr": torch.int32,
    "qo_indptr_": torch.int32,
    "kv_last_page_len": torch.int32,
    "qo_indptr_unified_decode": torch.int32,
    "mask_indptr": torch.int64,
    "workspace_buffer": torch.uint8,
}


def _backend_class(kind: str) -> type[Any]:
    if kind == "aiter-ext":
        from sglang_aiter_plugin.backend.classes import AiterExtAttnBackend

        return AiterExtAttnBackend
    from sglang.srt.layers.attention.aiter_backend import AiterAttnBackend

    stock: type[Any] = AiterAttnBackend
    return stock


def _build(kind: str, setup: Setup, decode_path: str, monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("SGLANG_USE_AITER_UNIFIED_ATTN", "1" if decode_path == "unified" else "0")
    backend = _backend_class(kind)(setup.runner)
    backend.test_buffer_names = [s.name for s in discover(backend, POOL)]
    backend.init_cuda_graph_state(setup.max_bs, setup.max_bs)
    return backend


def check_rows(backend: Any, max_bs: int) -> None:
    """Every per-batch buffer holds max_bs rows (indptrs max_bs + 1 entries)."""
    short = {}
    for name in backend.test_buffer_names:
        tensor = getattr(backend, name)
        if name == "workspace_buffer":
            need = max_bs * workspace_bytes_per_row(backend)
            if tensor.numel() < need:
                short[name] = (tensor.numel(), need)
            continue
        need = max_bs + (0 if name == "kv_last_page_len" else 1)
        if tensor.shape[0] < need:
            short[name] = (tensor.shape[0], need)
    assert not short, f"buffers shorter than max_bs={max_bs} needs: {short}"


def check_holders(backend: Any, max_bs: int) -> None:
    """The prefill updater writes the very tensors the backend reads."""
    updater = backend.indices_updater_prefill
    stale = [
        name
        for name in ("kv_indptr", "qo_indptr", "kv_last_page_len")
        if getattr(updater, name) is not getattr(backend, name)
    ]
    assert not stale, f"indices_updater_prefill holds other tensors than the backend: {stale}"


def check_fills(backend: Any, max_bs: int) -> None:
    """Contents that must stay do, over all max_bs rows."""
    assert torch.equal(backend.kv_last_page_len[:max_bs], torch.ones(max_bs, dtype=torch.int32))
    if hasattr(backend, "qo_indptr_unified_decode"):
        want = torch.arange(max_bs + 1, dtype=torch.int32)
        assert torch.equal(backend.qo_indptr_unified_decode[: max_bs + 1], want)
    assert int(backend.kv_indptr[0]) == 0
    assert int(backend.qo_indptr[0]) == 0


def check_dtypes(backend: Any, max_bs: int) -> None:
    """int32 indptrs and last-page lengths, int64 mask_indptr, as upstream allocates them."""
    got = {n: getattr(backend, n).dtype for n in backend.test_buffer_names}
    assert got == {n: ExpectedDtypes[n] for n in got}


def check_frozen(backend: Any, max_bs: int) -> None:
    """Growing after graphs were captured is refused, with the reason, and changes nothing."""
    before = backend.kv_indptr
    with pytest.raises(PoolFrozenError, match="captured"):
        backend.init_cuda_graph_state(max_bs + 2, max_bs + 2)
    assert backend.kv_indptr is before


CHECKS: dict[str, Callable[[Any, int], None]] = {
    "rows": check_rows,
    "holders": check_holders,
    "fills": check_fills,
    "dtypes": check_dtypes,
    "frozen": check_frozen,
}


def _param(kind: str, *values: str) -> Any:
    check = values[-1]
    gap = kind == "upstream" and check in UPSTREAM_GAPS
    marks = [pytest.mark.xfail(strict=True, reason=f"upstream gap: {check}")] if gap else []
    return pytest.param(kind, *values, marks=marks, id="-".join((kind, *values)))


def _kinds_and_checks() -> list[tuple[str, str]]:
    return [(kind, check) for kind in ("aiter-ext", "upstream") for check in CHECKS
            if not (kind == "upstream" and check == "frozen")]


def _params() -> list[Any]:
    return [_param(kind, scenario, path, check) for kind, check in _kinds_and_checks()
            for scenario in PADDED for path in DECODE_PATHS]


@pytest.mark.parametrize(
    ("kind", "sglang_setup", "decode_path", "check"), _params(), indirect=["sglang_setup"]
)
def test_padded_graph_batch(
    kind: str, sglang_setup: Setup, decode_path: str, check: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert sglang_setup.max_bs > POOL, sglang_setup.capture_bs  # the configuration pads
    backend = _build(kind, sglang_setup, decode_path, monkeypatch)
    CHECKS[check](backend, sglang_setup.max_bs)


@pytest.mark.parametrize("sglang_setup", ["plain"], indirect=True)
@pytest.mark.parametrize("kind", ["aiter-ext", "upstream"])
def test_without_padding_both_backends_agree(
    kind: str, sglang_setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert sglang_setup.max_bs == POOL
    backend = _build(kind, sglang_setup, "ragged", monkeypatch)
    for check in ("rows", "holders", "fills", "dtypes"):
        CHECKS[check](backend, sglang_setup.max_bs)


@pytest.mark.parametrize(("kind", "mla", "check"),
                         [_param(kind, "mla", check) for kind, check in _kinds_and_checks()])
def test_padded_graph_batch_mla(
    kind: str, mla: str, check: str, mla_setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert mla_setup.max_bs > POOL
    backend = _build(kind, mla_setup, "ragged", monkeypatch)
    assert "qo_indptr_" in backend.test_buffer_names
    CHECKS[check](backend, mla_setup.max_bs)


@pytest.mark.parametrize("sglang_setup", ["two-batch-overlap"], indirect=True)
@pytest.mark.parametrize("max_bs", [0, -2])
def test_a_graph_batch_below_one_row_is_refused_before_upstream_runs(
    sglang_setup: Setup, max_bs: int
) -> None:
    from sglang_aiter_plugin.backend.classes import (
        AiterExtAttnBackend,
        AiterExtMultiStepDraftBackend,
    )

    for backend in (
        AiterExtAttnBackend(sglang_setup.runner),
        AiterExtMultiStepDraftBackend(sglang_setup.runner, 1, 3),
    ):
        before = backend.kv_indptr
        with pytest.raises(ValueError, match=rf"for {max_bs} rows .*max_bs={max_bs}.* at least 1"):
            backend.init_cuda_graph_state(max_bs, 1)
        assert backend.kv_indptr is before
        assert not pool_frozen(backend.buffer_pool)
        assert getattr(backend, "cuda_graph_kv_indices", None) is None  # upstream never ran


@pytest.mark.parametrize("sglang_setup", ["two-batch-overlap"], indirect=True)
def test_a_kv_indices_layout_the_plugin_does_not_know_stops_graph_set_up_by_name(
    sglang_setup: Setup, monkeypatch: pytest.MonkeyPatch, sglang_version: Any
) -> None:
    from sglang.srt.layers.attention.aiter_backend import AiterAttnBackend

    from sglang_aiter_plugin.backend.classes import AiterExtAttnBackend
    from sglang_aiter_plugin.backend.widths import UnknownGraphLayoutError

    upstream = AiterAttnBackend.init_cuda_graph_state

    def other_layout(self: Any, max_bs: int, *args: Any, **kw: Any) -> None:
        upstream(self, max_bs, *args, **kw)
        self.cuda_graph_kv_indices = torch.zeros(5, dtype=torch.int32)  # neither known layout

    monkeypatch.setattr(AiterAttnBackend, "init_cuda_graph_state", other_layout)
    backend = AiterExtAttnBackend(sglang_setup.runner)
    with pytest.raises(UnknownGraphLayoutError) as info:
        backend.init_cuda_graph_state(sglang_setup.max_bs, sglang_setup.max_bs)
    text = str(info.value)
    assert f"sglang {sglang_version}" in text
    assert "cuda_graph_kv_indices with 5 entries" in text
    assert "--attention-backend aiter" in text
    assert not pool_frozen(backend.buffer_pool)  # no graph is captured against it
