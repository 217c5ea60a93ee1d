"""The ledger of upstream ``aiter`` backend defects that ``aiter-ext`` covers (:data:`DEFECTS`),
per release as measured."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from packaging.version import Version

__all__ = ["DEFECTS", "UpstreamDefect", "defects_on"]


class UpstreamDefect(NamedTuple):
    """A defect of upstream's AITER backend that ``aiter-ext`` covers: ``releases`` as
    ``first-last`` (``last`` empty: every release so far); ``fixed_in``: the first release where
    upstream is right (``None``: none yet)."""

    name: str
    symptom: str
    releases: str
    upstream: str
    remove_when: str
    fixed_in: str | None = None

    def affects(self, release: Version) -> bool:
        """Whether upstream's backend in ``release`` has this defect (by :attr:`releases`)."""
        from packaging.version import Version

        first, _, last = self.releases.partition("-")
        public = Version(release.public)
        return Version(first) <= public and (not last or public <= Version(last))


#: The backend's ledger (``tests/test_ledger.py`` checks each fix acts exactly where it says).
DEFECTS: tuple[UpstreamDefect, ...] = (
    UpstreamDefect(
        "rows", "kv_last_page_len, workspace_buffer and qo_indptr_unified_decode stay sized for "
        "the request pool P while CUDA graphs are captured (and MLP-sync pads eager batches) "
        "above it: shape errors, or kernels reading past them", "0.5.11-",
        "sglang#22598 regrows only the indptrs (sglang#20978 padded the graphs); sglang#28764 "
        "(open) sets them up at eager init, for the largest eager batch",
        "upstream sizes every per-batch buffer by the largest batch it sends"),
    UpstreamDefect(
        "draft-kv-indptr", "the EAGLE draft wrapper's shared kv_indptr is never grown: at a padded "
        "draft batch each step's last entry lands in the next step's first", "0.5.11-", "none",
        "upstream grows the draft wrapper's kv_indptr with its graphs"),
    UpstreamDefect(
        "prefill-updater", "every prefill after graph set-up gets an all-zero cu_seqlens_q: the "
        "prefill updater keeps the qo_indptr upstream replaced", "0.5.11-0.5.22",
        "no PR found: 0.5.23's extend path reads the updater's own buffer",
        "the oldest supported release is 0.5.23", fixed_in="0.5.23"),
    UpstreamDefect(
        "kv-indices-per-page", "cuda_graph_kv_indices holds one entry per page while decode "
        "(ragged, MLA), target-verify and draft-extend replay write one per token: at page size "
        "> 1 a long batch writes past it (HSA_STATUS_ERROR_MEMORY_APERTURE_VIOLATION at a later "
        "torch.cat)", "0.5.11-0.5.12.post1", "sglang#24587", "the oldest supported release is "
        "0.5.13", fixed_in="0.5.13"),
    UpstreamDefect(
        "verify-draft-slack", "MLA target-verify writes seq_len + num_draft_tokens entries per row "
        "of cuda_graph_kv_indices, which has no room for the draft tokens", "0.5.11-0.5.12.post1",
        "sglang#24587", "the oldest supported release is 0.5.13", fixed_in="0.5.13"),
    UpstreamDefect(
        "verify-custom-mask", "target-verify replay copies num_draft_tokens x (seq_len + "
        "num_draft_tokens) mask entries per request into cuda_graph_custom_mask, sized "
        "max_num_tokens x context: a request near the context length writes past it", "0.5.11-",
        "none", "upstream sizes the custom mask for the draft tokens"),
    UpstreamDefect(
        "draft-kv-indices-steps", "each EAGLE draft step appends one token per sequence, but each "
        "step's row of the draft wrapper's cuda_graph_kv_indices holds max_bs x topk x context: "
        "sequences near the context length write past the row", "0.5.11-", "none",
        "upstream sizes the draft rows for the steps"),
    UpstreamDefect(
        "eager-warm-up-ceiling", "with DP attention the eager warm-up (dummy) batch is padded to "
        "the attention-TP size, above the pool and the graph maximum (attention-TP 8, pool 100: "
        "104 rows)", "0.5.11-", "none for aiter: sglang#40668 (open) sizes FlashInfer's buffers "
        "for it", "upstream sizes the backend for the padded eager batch"),
    UpstreamDefect(
        "unified-page-table", "unified decode at page size 1 without a sliding window: graph "
        "replay never copies the page indices into the page table the captured kernel reads "
        "(zeros), so it attends to the wrong KV slots, silently", "0.5.11-",
        "sglang#40410, sglang#34833 (both open)",
        "upstream's graph metadata fills the table on that branch"),
)


def defects_on(release: Version) -> list[UpstreamDefect]:
    """The defects of upstream's backend in ``release`` that ``aiter-ext`` covers."""
    return [d for d in DEFECTS if d.affects(release)]
