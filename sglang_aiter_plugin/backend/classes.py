"""``AiterExtAttnBackend`` and ``AiterExtMultiStepDraftBackend``: sglang's AITER backends with
their per-batch buffers in one :class:`~.pool.BufferPool` each, and what each rights after
upstream's graph set-up; everything else is upstream's own."""

from __future__ import annotations

from typing import Any

import torch
from sglang.srt.layers.attention.aiter_backend import AiterAttnBackend, AiterMultiStepDraftBackend

from sglang_aiter_plugin._errors import AiterExtError
from sglang_aiter_plugin._rebind import rebound
from sglang_aiter_plugin._status import FixStatus
from sglang_aiter_plugin.backend.buffers import PREFILL_UPDATERS, discover
from sglang_aiter_plugin.backend.capacity import capacity_of
from sglang_aiter_plugin.backend.graph_state import PooledGraphState, outcome
from sglang_aiter_plugin.backend.page_table import install_page_table_fill, upstream_fills
from sglang_aiter_plugin.backend.pool import BufferPool, BufferSpec, Fill
from sglang_aiter_plugin.backend.split_tables import keep_split_tables
from sglang_aiter_plugin.backend.widths import widen

__all__ = ["AiterExtAttnBackend", "AiterExtMultiStepDraftBackend", "DraftBackendError"]


class DraftBackendError(AiterExtError, RuntimeError):
    """The draft wrapper's children were not built, or not lent their buffers, as the pool needs."""


class AiterExtAttnBackend(PooledGraphState, AiterAttnBackend):  # type: ignore[misc]
    """sglang's AITER backend whose per-batch buffers grow, together, to the captured batch."""

    cuda_graph_kv_indices: torch.Tensor

    def __init__(
        self,
        model_runner: Any,
        skip_prefill: bool = False,
        kv_indptr_buf: Any = None,
        topk: int = 1,
    ) -> None:
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, topk)
        capacity = capacity_of(model_runner).rows  # every path's largest batch, not only P
        borrowed = frozenset({"kv_indptr"}) if kv_indptr_buf is not None else frozenset()
        specs = discover(self, int(model_runner.req_to_token_pool.size), skip=borrowed)
        self.buffer_pool = BufferPool(self, specs, capacity, self.device)
        for name in self.buffer_pool.names():
            for updater in (getattr(self, attr, None) for attr in PREFILL_UPDATERS):
                if getattr(updater, name, None) is not None:  # None without that updater
                    self.buffer_pool.bind(updater, name, name)

    def _before_upstream(self, max_bs: int) -> None:
        if "kv_indptr" not in self.buffer_pool.names() and self.kv_indptr.shape[-1] < max_bs + 1:
            raise DraftBackendError(
                f"kv_indptr lent to this backend holds {self.kv_indptr.shape[-1]} entries, fewer "
                f"than max_bs + 1 = {max_bs + 1}: the owner (the multi-step draft backend) must "
                "grow it before its children's init_cuda_graph_state"
            )

    def _after_upstream(self, max_bs: int, max_num_tokens: int, lent: bool) -> list[FixStatus]:
        """Widen ``cuda_graph_kv_indices`` (unless lent) and ``cuda_graph_custom_mask``; fill the
        unified page table at page size 1 where upstream does not; hold the split tables MLA
        graphs read from aiter's cache (each step names its defect in ``backend.defects``); one
        status per defect this configuration has."""
        context, page = int(self.max_context_len), int(self.page_size)
        blocks, drafts = -(-context // page), self._extra_per_row()
        # one entry per token of every page, plus the draft tokens MLA target-verify adds per row
        # (the layout sglang allocates from 0.5.13, sglang#24587)
        need = max_bs * (blocks * page + drafts)
        fixes = []
        if not lent:  # kv-indices-per-page (page > 1) and verify-draft-slack (draft tokens)
            # whole pages per row: 0.5.11-0.5.12.post1 also view it as the unified page table
            wide = widen(self, "cuda_graph_kv_indices", need, known={
                max_bs * blocks: "one per page, 0.5.11-0.5.12.post1"}, multiple_of=blocks)
            fixes += [outcome(name, wide, f"cuda_graph_kv_indices widened to {need} entries",
                              "upstream sizes cuda_graph_kv_indices per token, with the drafts")
                      for name, has in (("kv-indices-per-page", page > 1),
                                        ("verify-draft-slack", drafts > 0)) if has]
        if getattr(self, "cuda_graph_custom_mask", None) is not None and drafts:
            # verify-custom-mask: room for the draft tokens in every row
            fixes.append(outcome("verify-custom-mask", widen(
                self, "cuda_graph_custom_mask", max_num_tokens * (context + drafts),
                known={max_num_tokens * context: "max_num_tokens x context, 0.5.11-"}),
                "cuda_graph_custom_mask widened for the draft tokens",
                "upstream sizes cuda_graph_custom_mask for the draft tokens"))
        if (not lent and page == 1
                and getattr(self, "decode_uses_page_table", self.use_triton_unified_attention)
                and not self.use_sliding_window_kv_pool and not self.use_mla):
            probe = upstream_fills(self)  # unified-page-table
            if not probe.fills:
                install_page_table_fill(self)
            undecided = f" (whether upstream fills it is unknown: {probe.undecided})"
            fixes.append(outcome("unified-page-table", not probe.fills,
                                 "the page table is filled after upstream's graph metadata"
                                 + (undecided if probe.undecided else ""),
                                 "upstream's graph metadata fills the page table"))
        if self.use_mla:  # mla-split-table (a draft child too: its graphs read tables as well)
            fixes.append(keep_split_tables(self))
        return fixes


class AiterExtMultiStepDraftBackend(PooledGraphState, AiterMultiStepDraftBackend):  # type: ignore[misc]
    """sglang's EAGLE draft wrapper with its shared ``kv_indptr`` (``(steps, P * topk + 1)``, row
    ``i`` lent to child ``i``) pooled: growth re-points the wrapper and every child's row."""

    rows_defect = "draft-kv-indptr"

    cuda_graph_kv_indices: torch.Tensor

    def __init__(self, model_runner: Any, topk: int, speculative_num_steps: int) -> None:
        # Upstream builds its per-step children through the module-global name AiterAttnBackend.
        init = rebound(
            AiterMultiStepDraftBackend.__init__, {"AiterAttnBackend": AiterExtAttnBackend}
        )
        init(self, model_runner, topk, speculative_num_steps)
        wrong = [
            type(c).__name__ for c in self.attn_backends if not isinstance(c, AiterExtAttnBackend)
        ]
        if wrong:
            raise DraftBackendError(
                f"draft children were built as {wrong}, not AiterExtAttnBackend")
        spec = BufferSpec("kv_indptr", torch.int32, Fill.ZEROS, per_row=int(topk), extra=1,
                          leading=(int(speculative_num_steps),))
        self.buffer_pool = BufferPool(self, [spec], capacity_of(model_runner).rows, self.device)
        for step, child in enumerate(self.attn_backends):
            self.buffer_pool.bind(child, "kv_indptr", "kv_indptr", row=step)

    def _extra_per_row(self) -> int:
        return int(self.speculative_num_steps)  # each step appends one token per sequence

    def _after_upstream(self, max_bs: int, max_num_tokens: int, lent: bool) -> list[FixStatus]:
        """Widen each step's row of ``cuda_graph_kv_indices`` by the steps' appended tokens and
        hand every child its new row."""
        topk, steps, context = int(self.topk), int(self.speculative_num_steps), int(
            self.max_context_len)
        page = int(self.attn_backends[0].page_size) if self.attn_backends else 1
        blocks = -(-context // page)  # whole pages per row: children may view it as pages
        wide = widen(self, "cuda_graph_kv_indices", max_bs * topk * (context + steps), known={
            max_bs * topk * context: "max_bs x topk x context, 0.5.13-",
            max_num_tokens * context: "max_num_tokens x context, 0.5.11-0.5.12.post1"},
            multiple_of=blocks, leading=(steps,))
        if wide:
            for step, child in enumerate(self.attn_backends):  # draft-kv-indices-steps
                child.cuda_graph_kv_indices = self.cuda_graph_kv_indices[step]
        return [outcome("draft-kv-indices-steps", wide, "each step's row widened by the steps",
                        "upstream sizes each step's row for the steps")]
