"""Discovery of per-batch buffers on the installed sglang's backend, and the workspace size."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from packaging.version import Version

from sglang_aiter_plugin.backend.buffers import (
    UnknownBatchBufferError,
    discover,
    workspace_bytes_per_row,
)
from testkit.sglang_setup import POOL, Setup


def _upstream(setup: Setup, monkeypatch: pytest.MonkeyPatch, unified: bool) -> Any:
    from sglang.srt.layers.attention.aiter_backend import AiterAttnBackend

    monkeypatch.setenv("SGLANG_USE_AITER_UNIFIED_ATTN", "1" if unified else "0")
    return AiterAttnBackend(setup.runner)


@pytest.mark.parametrize("sglang_setup", ["plain"], indirect=True)
@pytest.mark.parametrize("unified", [False, True], ids=["ragged", "unified"])
def test_discovers_what_the_installed_release_holds(
    sglang_setup: Setup, unified: bool, monkeypatch: pytest.MonkeyPatch, sglang_version: Version
) -> None:
    backend = _upstream(sglang_setup, monkeypatch, unified)
    names = {s.name for s in discover(backend, POOL)}
    want = {"kv_indptr", "qo_indptr", "mask_indptr", "kv_last_page_len"}
    if sglang_version >= Version("0.5.12"):
        want.add("qo_indptr_unified_decode")
    if not unified:
        want.add("workspace_buffer")
    assert names == want


@pytest.mark.parametrize("sglang_setup", ["plain"], indirect=True)
def test_an_unknown_batch_sized_buffer_fails_loudly(sglang_setup: Setup) -> None:
    from sglang.srt.layers.attention.aiter_backend import AiterAttnBackend

    from sglang_aiter_plugin.backend.classes import AiterExtAttnBackend

    class FutureRelease(AiterAttnBackend):  # type: ignore[misc]
        """Stands for a release that adds one more buffer sized by the request pool."""

        def __init__(self, model_runner: Any, *args: Any) -> None:
            super().__init__(model_runner, *args)
            self.new_seq_starts = torch.zeros(POOL + 1, dtype=torch.int32)

    class ExtOnFutureRelease(AiterExtAttnBackend, FutureRelease):
        pass

    with pytest.raises(UnknownBatchBufferError) as exc:
        ExtOnFutureRelease(sglang_setup.runner)
    message = str(exc.value)
    assert "new_seq_starts (34,)" in message
    assert "--attention-backend aiter" in message
    assert "Upgrade sglang-aiter-plugin" in message


@pytest.mark.parametrize("sglang_setup", ["plain"], indirect=True)
def test_workspace_per_row_covers_upstream_and_the_kernel_layout(
    sglang_setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = _upstream(sglang_setup, monkeypatch, unified=False)
    per_row = workspace_bytes_per_row(backend)
    heads, parts, dim = backend.num_head, backend.max_num_partitions, backend.head_dim
    kernel_layout = (
        heads * parts * (8 + dim * torch.empty((), dtype=backend.input_dtype).element_size())
    )
    assert backend.workspace_buffer.numel() == POOL * per_row  # upstream's formula, per row
    assert per_row >= kernel_layout
