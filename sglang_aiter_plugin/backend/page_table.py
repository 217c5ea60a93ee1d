"""``unified-page-table`` (``backend.defects``): at page size 1 the unified decode graph reads a
page table upstream's graph metadata never fills; the fill runs after it."""

from __future__ import annotations

from typing import Any

from sglang_aiter_plugin.backend.graph_metadata import wrap_metadata_methods

__all__ = ["PATCH", "install_page_table_fill"]

PATCH = "unified-page-table"


def install_page_table_fill(backend: Any) -> None:
    """``unified-page-table``: after upstream's graph metadata for a decode batch, copy each row's
    page indices (its ``req_to_token`` row) into the page table, as eager decode builds it."""

    def fill(batch: Any) -> None:
        if batch.spec_info is not None or not batch.forward_mode.is_decode_or_idle():
            return
        bs = int(batch.batch_size)
        lens = batch.seq_lens_cpu if batch.seq_lens_cpu is not None else batch.seq_lens
        width = int(lens[:bs].max()) if bs else 0
        rows = backend.req_to_token[batch.req_pool_indices[:bs], :width]
        table = getattr(backend, "cuda_graph_page_table", None)  # its own (0.5.13+)
        if table is None:  # else a view of the indices, one page (here a token) per entry
            table = backend.cuda_graph_kv_indices.view(-1, int(backend.max_context_len))
        table[:bs, :width].copy_(rows)

    wrap_metadata_methods(backend, PATCH, "aiter-ext cannot fill the unified page "
                          "table its graphs read. Use --attention-backend aiter with --page-size "
                          "> 1 (or report the sglang release to sglang-aiter-plugin).", after=fill)
