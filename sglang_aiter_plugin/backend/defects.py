"""The defects of upstream's AITER backend that ``aiter-ext`` rights (:data:`DEFECTS`), as
measured per release: entries of the plugin's ledger (:class:`~sglang_aiter_plugin._ledger.Defect`).

Graph set-up reports one status per defect it decides, under the defect's name; ``doctor`` lists
the defects of the installed release; ``docs/ledger.md`` renders them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_aiter_plugin._ledger import Defect

if TYPE_CHECKING:
    from packaging.version import Version

__all__ = ["DEFECTS", "defects_on"]

_BACKEND = "sglang.srt.layers.attention.aiter_backend:AiterAttnBackend"
_DRAFT = "sglang.srt.layers.attention.aiter_backend:AiterMultiStepDraftBackend"
_SUB = "(subclassed: aiter-ext's own, around upstream's)"
_SET_UP = f"{_BACKEND}.init_cuda_graph_state {_SUB}"
_DRAFT_SET_UP = f"{_DRAFT}.init_cuda_graph_state {_SUB}"
_ROWS_ONLY = ("not installed where upstream's own buffers already hold the largest batch (graph "
              "set-up then says `not needed`)")

#: The backend's ledger (``tests/test_ledger.py`` checks each fix acts exactly where it says).
DEFECTS: tuple[Defect, ...] = (
    Defect(
        "rows", "per-batch buffers sized for the request pool, not the largest batch",
        (f"{_BACKEND}.__init__ {_SUB}", _SET_UP),
        why="kv_last_page_len, workspace_buffer and qo_indptr_unified_decode stay sized for the "
            "request pool P while CUDA graphs are captured (and MLP-sync pads eager batches) above "
            "it: shape errors, or kernels reading past them.",
        how="One pool holds every per-batch buffer, sized at construction for the largest batch "
            "sglang sends on any path and grown before graph capture if a graph runner asks for "
            "more (`backend/pool.py`, `backend/capacity.py`).",
        upstream="sglang#22598 regrows only the indptrs (sglang#20978 padded the graphs); "
                 "sglang#28764 (open) sets them up at eager init, for the largest eager batch.",
        steps_aside=f"{_ROWS_ONLY}; the code goes once upstream sizes every per-batch buffer by "
                    "the largest batch it sends.",
        releases="0.5.11-"),
    Defect(
        "draft-kv-indptr", "the EAGLE draft wrapper's shared kv_indptr is never grown",
        (f"{_DRAFT}.__init__ {_SUB}", _DRAFT_SET_UP),
        why="At a padded draft batch each step's last entry lands in the next step's first.",
        how="The draft wrapper's kv_indptr is pooled, one row per step lent to each child.",
        upstream="none",
        steps_aside=f"{_ROWS_ONLY}; the code goes once upstream grows the draft wrapper's "
                    "kv_indptr with its graphs.",
        releases="0.5.11-"),
    Defect(
        "prefill-updater", "the prefill updater keeps the qo_indptr upstream replaced",
        (_SET_UP,),
        why="Every prefill after graph set-up gets an all-zero cu_seqlens_q.",
        how="The pool re-points both prefill updaters whenever it grows.",
        upstream="no PR found: 0.5.23's extend path reads the updater's own buffer.",
        steps_aside="the code goes once the oldest supported release is 0.5.23.",
        releases="0.5.11-0.5.22", fixed_in="0.5.23"),
    Defect(
        "kv-indices-per-page", "cuda_graph_kv_indices holds one entry per page",
        (_SET_UP,),
        why="Decode (ragged, MLA), target-verify and draft-extend replay write one entry per "
            "token: at page size > 1 a long batch writes past it "
            "(HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION at a later torch.cat).",
        how="Graph set-up widens cuda_graph_kv_indices to one entry per token of every page "
            "(`backend/widths.py`).",
        upstream="sglang#24587",
        steps_aside="not installed where upstream's buffer already has the width; the code goes "
                    "once the oldest supported release is 0.5.13.",
        releases="0.5.11-0.5.12.post1", fixed_in="0.5.13"),
    Defect(
        "verify-draft-slack", "no room for the draft tokens in MLA target-verify's kv indices",
        (_SET_UP,),
        why="MLA target-verify writes seq_len + num_draft_tokens entries per row of "
            "cuda_graph_kv_indices, which has no room for the draft tokens.",
        how="Graph set-up widens cuda_graph_kv_indices by the draft tokens per row.",
        upstream="sglang#24587",
        steps_aside="not installed where upstream's buffer already has the width; the code goes "
                    "once the oldest supported release is 0.5.13.",
        releases="0.5.11-0.5.12.post1", fixed_in="0.5.13"),
    Defect(
        "verify-custom-mask", "target-verify's custom mask has no room for the draft tokens",
        (_SET_UP,),
        why="Target-verify replay copies num_draft_tokens x (seq_len + num_draft_tokens) mask "
            "entries per request into cuda_graph_custom_mask, sized max_num_tokens x context: a "
            "request near the context length writes past it.",
        how="Graph set-up widens cuda_graph_custom_mask for the draft tokens.",
        upstream="none",
        steps_aside="not installed where upstream's mask already has the width; the code goes "
                    "once upstream sizes the custom mask for the draft tokens.",
        releases="0.5.11-"),
    Defect(
        "draft-kv-indices-steps", "each EAGLE draft step's kv-indices row lacks the steps",
        (_DRAFT_SET_UP,),
        why="Each draft step appends one token per sequence, but each step's row of the draft "
            "wrapper's cuda_graph_kv_indices holds max_bs x topk x context: sequences near the "
            "context length write past the row.",
        how="Graph set-up widens each step's row by the steps.",
        upstream="none",
        steps_aside="not installed where upstream's rows already have the width; the code goes "
                    "once upstream sizes the draft rows for the steps.",
        releases="0.5.11-"),
    Defect(
        "eager-warm-up-ceiling", "the padded eager warm-up batch is above the pool and the graphs",
        (f"{_BACKEND}.__init__ {_SUB}",),
        why="With DP attention the eager warm-up (dummy) batch is padded to the attention-TP "
            "size, above the pool and the graph maximum (attention-TP 8, pool 100: 104 rows).",
        how="The pool holds the eager MLP-sync maximum from construction.",
        upstream="none for aiter: sglang#40668 (open) sizes FlashInfer's buffers for it.",
        steps_aside=f"{_ROWS_ONLY}; the code goes once upstream sizes the backend for the padded "
                    "eager batch.",
        releases="0.5.11-"),
    Defect(
        "unified-page-table", "unified decode graphs at page size 1 read an unfilled page table",
        (_SET_UP, f"{_BACKEND}.init_forward_metadata_replay_cuda_graph (0.5.11-0.5.17: the "
                  "instance's, wrapped)",
         f"{_BACKEND}.init_forward_metadata_out_graph (0.5.18+: the instance's, wrapped)"),
        why="Unified decode at page size 1 without a sliding window: graph replay never copies "
            "the page indices into the page table the captured kernel reads (zeros), so it "
            "attends to the wrong KV slots, silently.",
        how="After upstream's graph metadata, the page indices are copied into the table "
            "(`backend/page_table.py`).",
        upstream="sglang#40410, sglang#34833 (both open)",
        steps_aside="graph set-up runs upstream's metadata on one decode row and installs the "
                    "fill only where upstream leaves the table unfilled (`not needed` "
                    "otherwise; where it cannot tell, it fills and says so); the code goes once "
                    "upstream's graph metadata fills the table on that branch.",
        releases="0.5.11-"),
    Defect(
        "mla-split-table", "MLA decode graphs read a split table that aiter's cache frees",
        (f"{_BACKEND}._mla_decode_fwd_with_head_pad (aiter-ext's instance, from graph set-up: a "
         "copy calling the plugin's copy of aiter's mla_decode_fwd)", _SET_UP),
        why="Where sglang lets aiter pick an MLA decode's KV splits (a bf16 KV cache at 16 or 128 "
            "heads a rank takes the non-persistent kernel, and sglang never passes "
            "num_kv_splits_indptr), aiter's mla_decode_fwd takes the split table from "
            "get_meta_param, an lru_cache of 128 entries that owns it. A decode graph reads that "
            "table at every replay; 128 eager decodes with other KV totals later the entry is "
            "evicted and freed, its memory is reused, and replays read whatever lies there "
            "(DeepSeek-R1 with DP attention: gsm8k 0.03 instead of 0.96).",
        how="From graph set-up, aiter-ext's MLA decode calls a copy of aiter's mla_decode_fwd "
            "whose get_meta_param is aiter's cached one that also hands the backend each table "
            "it returns while a graph is captured; the backend holds those tables as long as it "
            "holds its graphs (`backend/split_tables.py`). aiter's cache answers as before; a "
            "replay runs nothing more.",
        upstream="aiter#4587, aiter#5193, aiter#5194 (open; aiter at e4048607 still caches)",
        steps_aside="graph set-up decides by the installed aiter: `not needed` where its "
                    "mla_decode_fwd looks up no cached table, or get_meta_param builds one per "
                    "call or keeps every table; the code goes once every aiter that sglang's "
                    "supported releases ship does so.",
        releases="0.5.11-"),
)


def defects_on(release: Version) -> list[Defect]:
    """The defects of upstream's backend in ``release`` that ``aiter-ext`` covers."""
    return [d for d in DEFECTS if d.affects(release)]
