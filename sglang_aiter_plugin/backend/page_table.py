"""``unified-page-table`` (``backend.defects``): the unified decode graph's page table at page
size 1, filled after upstream's graph metadata only where that leaves it unfilled."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, NamedTuple

import torch

from sglang_aiter_plugin._errors import shorten
from sglang_aiter_plugin.backend.graph_metadata import wrap_metadata_methods

__all__ = ["PATCH", "Probe", "install_page_table_fill", "upstream_fills"]

PATCH = "unified-page-table"


class Probe(NamedTuple):
    """What the probe found: ``fills`` whether upstream's graph metadata fills the table;
    ``undecided`` why it could not tell (then ``fills`` is false: the plugin fills the table,
    which is right whether upstream also does or not)."""

    fills: bool
    undecided: str | None = None


def _table(backend: Any) -> torch.Tensor:
    table: torch.Tensor | None = getattr(backend, "cuda_graph_page_table", None)  # 0.5.13+
    if table is None:  # else a view of the indices, one page (here a token) per entry
        table = backend.cuda_graph_kv_indices.view(-1, int(backend.max_context_len))
    return table


def upstream_fills(backend: Any) -> Probe:
    """Whether upstream's graph metadata (the class's, not this instance's hooks) writes the page
    table: one decode row (request slot 0, one token) through the method graph capture calls,
    over a first entry marked -1, which it holds again afterwards. Where that call raises (a
    release that reads more of the batch than the stand-in has) the probe cannot decide, and
    says so."""
    table, cls = _table(backend), type(backend)
    out_graph = hasattr(cls, "init_forward_metadata_out_graph")  # 0.5.13+
    method = "init_forward_metadata_out_graph" if out_graph else (
        "init_forward_metadata_capture_cuda_graph")
    one = torch.ones(1, dtype=torch.int64, device=backend.device)
    slot = torch.zeros(1, dtype=torch.int64, device=backend.device)
    kept = table[0, 0].clone()
    table[0, 0] = -1
    try:
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        if out_graph:
            cls.init_forward_metadata_out_graph(backend, SimpleNamespace(
                batch_size=1, req_pool_indices=slot, seq_lens=one, seq_lens_cpu=one.cpu(),
                seq_lens_sum=1, forward_mode=ForwardMode.DECODE, spec_info=None,
                encoder_lens=None, out_cache_loc=None, input_ids=slot), in_capture=True)
        else:
            cls.init_forward_metadata_capture_cuda_graph(
                backend, 1, 1, slot, one, None, ForwardMode.DECODE, None)
        return Probe(bool(table[0, 0] != -1))
    except Exception as exc:  # cannot tell: the safe side is to fill it
        return Probe(False, f"upstream's {method} raised on a one-row decode batch: "
                            f"{shorten(f'{type(exc).__name__}: {exc}', 200, quoted=False)}")
    finally:
        table[0, 0] = kept


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
        _table(backend)[:bs, :width].copy_(rows)

    wrap_metadata_methods(backend, PATCH, "aiter-ext cannot fill the unified page "
                          "table its graphs read. Use --attention-backend aiter with --page-size "
                          "> 1 (or report the sglang release to sglang-aiter-plugin).", after=fill)
