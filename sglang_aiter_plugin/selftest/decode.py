"""Decode batches through a backend, checked row by row: at every captured graph size
(:func:`graph_sizes`) and as one eager batch after DP attention's MLP-sync padding
(:func:`eager_batch`). The self-test's cases and the GPU scripts run these.

Before a batch runs, :func:`overruns` reads the backend's buffers: what aiter's kernels would read
or write past for that batch (a per-batch buffer with fewer rows, a graph index buffer with fewer
entries than the batch's tokens, a workspace smaller than aiter's layout needs).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sglang_aiter_plugin.selftest.cases import Case

if TYPE_CHECKING:
    import torch

    from sglang_aiter_plugin.selftest.sglang_setup import Setup

__all__ = ["CLASSES", "RowShape", "SizeOutcome", "build_backend", "draft_sizes", "eager_batch",
           "graph_sizes", "overruns", "query_rows", "requests_for", "row_error"]

CLASSES = {  # kind -> (decode backend, multi-step draft wrapper), each (module, class)
    "upstream": (("sglang.srt.layers.attention.aiter_backend", "AiterAttnBackend"),
                 ("sglang.srt.layers.attention.aiter_backend", "AiterMultiStepDraftBackend")),
    "aiter-ext": (("sglang_aiter_plugin.backend.classes", "AiterExtAttnBackend"),
                  ("sglang_aiter_plugin.backend.classes", "AiterExtMultiStepDraftBackend")),
}


def build_backend(kind: str, setup: Setup, *, draft: tuple[int, int] | None = None) -> Any:
    """``kind``'s decode backend on ``setup``'s runner; ``draft=(topk, steps)``: its EAGLE
    multi-step draft wrapper instead."""
    module, name = CLASSES[kind][0 if draft is None else 1]
    cls = getattr(importlib.import_module(module), name)
    return cls(setup.runner) if draft is None else cls(setup.runner, *draft)


class RowShape:
    """What a row of ``q`` and of the output hold for ``backend``, and the reference for them."""

    def __init__(self, backend: Any, setup: Setup) -> None:
        from sglang_aiter_plugin.selftest.reference import make_layer

        self.runner = setup.runner
        self.dtype = backend.input_dtype
        self.heads = int(backend.num_head)
        self.mla = bool(getattr(backend, "use_mla", False))
        if self.mla:
            config = setup.runner.model_config
            rank, rope = int(config.kv_lora_rank), int(config.qk_rope_head_dim)
            nope = int(config.qk_nope_head_dim)
            self.q_dim, self.out_dim = rank + rope, rank
            self.scale = float((nope + rope) ** -0.5)
            self.layer = make_layer(backend, tp_k_head_num=1, tp_v_head_num=1,
                                    qk_head_dim=self.q_dim, v_head_dim=rank, head_dim=self.q_dim,
                                    scaling=self.scale)
        else:
            self.q_dim = self.out_dim = int(backend.head_dim)
            self.scale = float(self.q_dim**-0.5)
            self.layer = make_layer(backend)

    def queries(self, rows: int, gen: torch.Generator, device: str) -> torch.Tensor:
        import torch

        return torch.randn(rows, self.heads, self.q_dim, generator=gen).to(self.dtype).to(device)

    def error(self, out: torch.Tensor, q: torch.Tensor, reqs: list[int],
              lens: list[int]) -> float:
        """The largest absolute difference of the real rows from the torch reference (inf where
        a row holds NaN)."""
        from sglang_aiter_plugin.selftest.reference import reference_mla_rows, reference_rows

        rows = len(reqs)
        got = out[:rows].reshape(rows, self.heads, self.out_dim).float()
        if self.mla:
            want = reference_mla_rows(self.runner, q[:rows], reqs, lens, self.scale,
                                      self.out_dim)
        else:
            want = reference_rows(self.runner, q[:rows], reqs, lens)
        return row_error(got, want)


def row_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """The largest absolute difference of ``got`` from ``want`` (off in either direction; inf
    where a row holds NaN)."""
    diff = (got.float() - want.float().to(got.device)).abs()
    return float("inf") if bool(diff.isnan().any()) else float(diff.max())


def requests_for(bs: int, pool: int, gen: torch.Generator,
                 max_len: int) -> tuple[list[int], list[int]]:
    """At most ``pool`` real requests in a batch of ``bs`` rows (sglang pads the rest), each in a
    random request slot with a random length of 1 to ``max_len`` tokens."""
    import torch

    n = min(bs, pool)
    reqs = torch.randperm(pool, generator=gen)[:n].tolist()
    lens = torch.randint(1, max_len + 1, (n,), generator=gen).tolist()
    return reqs, lens


@dataclass
class SizeOutcome:
    """One batch: its rows, its real rows, and what happened (the verdict is
    :func:`.checks.judge`'s)."""

    bs: int
    real_rows: int
    max_err: float | None = None
    """The largest absolute difference of its real rows from the reference."""
    held: str = ""
    """What the batch would read or write past (it did not run)."""
    past: str = ""
    """What the batch would read or write past when nothing held it back (it ran, or raised)."""
    error: BaseException | None = None
    wrong: str = ""
    """What its metadata holds wrongly (the draft wrapper's check; no rows are compared)."""


def graph_sizes(case: Case, setup: Setup, backend: Any, device: str, seed: int, max_len: int,
                *, hold: Callable[[str], bool], capture: bool = True,
                draft: int = 1) -> Iterator[SizeOutcome]:
    """At every size sglang captures: the capture metadata, a warm-up, the forward captured in a
    graph (``capture``; else the forward runs eagerly), then the replay metadata and the replay
    with real requests; after its graph state is set up for the largest size. ``draft``: with
    ``case.mode`` ``verify``, each request's draft tokens (a target-verify batch, top-1). A batch
    whose :func:`overruns` ``hold`` accepts is not run. Stops after the first batch that
    raises."""
    import torch

    from sglang_aiter_plugin.selftest.decode_batch import DecodeBatch, VerifyBatch

    verify = case.mode in ("verify", "draft-extend")
    per_req = draft if verify else 1
    backend.init_cuda_graph_state(setup.max_bs, setup.max_bs * per_req)
    shape = RowShape(backend, setup)
    pool = int(setup.runner.req_to_token_pool.size)
    fill = int(backend.get_cuda_graph_seq_len_fill_value())
    gen = torch.Generator().manual_seed(seed)
    for bs in setup.capture_bs:
        reqs, lens = requests_for(bs, pool, gen, max_len)
        q = shape.queries(len(reqs) * per_req, gen, device)
        drafts = per_req * len(reqs) if case.mode == "draft-extend" else 0  # in the KV too
        short = overruns(backend, case, bs, sum(lens) + fill * (bs - len(reqs)) + drafts,
                         draft=per_req)
        if short and hold(short):
            yield SizeOutcome(bs, len(reqs), held=short)
            continue
        width = shape.heads * shape.q_dim
        batch = (VerifyBatch(backend, bs, device, draft, setup.runner, q_width=width,
                             mode=case.mode) if verify
                 else DecodeBatch(backend, bs, device, q_width=width))
        _pools_of(setup, batch.fb)
        try:
            out = batch.run(shape.layer, reqs, lens, q, batch.capture(shape.layer) if capture
                            else None)
            if device != "cpu":
                torch.cuda.synchronize(torch.device(device))
        except Exception as exc:
            yield SizeOutcome(bs, len(reqs), error=exc, past=short)
            return
        yield SizeOutcome(bs, len(reqs), max_err=shape.error(out, q, *query_rows(
            reqs, lens, draft if verify else 0)), past=short)


def query_rows(reqs: list[int], lens: list[int], draft: int = 0) -> tuple[list[int], list[int]]:
    """Each query row's request and the tokens it sees: a decode row (``draft`` 0) its request's
    ``lens``; with ``draft`` tokens a request (target verify, draft extend), draft token ``j`` of
    a request with ``n`` tokens before the drafts, ``n + j + 1``."""
    if not draft:
        return list(reqs), list(lens)
    return ([r for r in reqs for _ in range(draft)],
            [n + j + 1 for n in lens for j in range(draft)])


def eager_batch(case: Case, setup: Setup, backend: Any, device: str, seed: int, max_len: int,
                *, rows: int, others: list[int], hold: Callable[[str], bool],
                draft: int = 1) -> SizeOutcome:
    """This rank's ``rows`` requests (slots 0...) while the other DP ranks report ``others``
    tokens, padded by sglang's own ``prepare_mlp_sync_batch``, through ``init_forward_metadata``
    and the forward as sglang's eager forward runs them (no graph state): ``forward_decode``, or
    with ``case.mode`` ``verify`` a target-verify batch of ``draft`` tokens a request through
    ``forward_extend``."""
    import torch

    from sglang_aiter_plugin.selftest.decode_batch import (
        Batch,
        draft_kv,
        extend_query,
        verify_mask,
    )
    from sglang_aiter_plugin.selftest.mlp_sync import mlp_synced, plain_batch

    verify = case.mode == "verify"
    per_req = draft if verify else 1
    shape = RowShape(backend, setup)
    gen = torch.Generator().manual_seed(seed)
    reqs = list(range(rows))
    lens = torch.randint(1, max_len + 1, (rows,), generator=gen).tolist()
    fb = plain_batch(rows, device, lens=lens, tokens=rows * per_req,
                     forward_mode=_verify_mode() if verify else None)
    if verify:
        fb.spec_info = Batch(draft_token_num=draft, num_tokens_per_req=draft,
                             custom_mask=verify_mask(lens, draft, device))
    fb = mlp_synced(setup, backend, fb, others, device)
    _pools_of(setup, fb)
    bs = int(fb.batch_size)
    q = shape.queries(bs * per_req, gen, device)
    short = overruns(backend, case, bs, int(fb.seq_lens.sum()), draft=per_req)
    if short and hold(short):
        return SizeOutcome(bs, rows, held=short)
    try:
        backend.init_forward_metadata(fb)
        if verify:
            k, v = draft_kv(setup.runner, fb.req_pool_indices, fb.seq_lens, draft)
            out = backend.forward_extend(extend_query(backend, q.reshape(bs * draft, -1)), k, v,
                                         shape.layer, fb, save_kv_cache=False)
        else:
            out = backend.forward_decode(q.reshape(bs, -1), None, None, shape.layer, fb,
                                         save_kv_cache=False)
        if device != "cpu":
            torch.cuda.synchronize(torch.device(device))
    except Exception as exc:
        return SizeOutcome(bs, rows, error=exc, past=short)
    err = shape.error(out, q, *query_rows(reqs, lens, draft if verify else 0)) if rows else None
    return SizeOutcome(bs, rows, max_err=err, past=short)


def _verify_mode() -> Any:
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    return ForwardMode.TARGET_VERIFY


def draft_sizes(case: Case, setup: Setup, draft: Any, device: str, seed: int, max_len: int,
                *, hold: Callable[[str], bool]) -> Iterator[SizeOutcome]:
    """The EAGLE draft wrapper ``draft`` at every size sglang captures: its replay metadata twice
    (the second shows what the first left in element 0), then each step's ``kv_indptr`` row
    against the cumulative lengths of that step. A batch whose :func:`overruns` ``hold`` accepts
    is not run. Stops after the first batch that raises."""
    import torch

    from sglang_aiter_plugin.selftest.decode_batch import Batch, draft_metadata

    draft.init_cuda_graph_state(setup.max_bs, setup.max_bs)
    steps = int(draft.speculative_num_steps)
    gen = torch.Generator().manual_seed(seed)
    for bs in setup.capture_bs:
        short = overruns(draft, case, bs, 0)
        if short and hold(short):
            yield SizeOutcome(bs, min(bs, int(setup.runner.req_to_token_pool.size)), held=short)
            continue
        reqs, lens = requests_for(bs, int(setup.runner.req_to_token_pool.size), gen, max_len)
        pad = bs - len(reqs)
        seq = torch.tensor(lens + [1] * pad, device=device)
        fb = Batch(batch_size=bs, seq_lens=seq, seq_lens_cpu=seq.cpu(),
                   seq_lens_sum=int(seq.sum()), positions=seq.clone(), forward_mode=None,
                   req_pool_indices=torch.tensor(reqs + [0] * pad, device=device),
                   spec_info=Batch(), kv_loc_plan=None,
                   input_ids=torch.zeros(bs, dtype=torch.int64, device=device),
                   req_to_token_pool=setup.runner.req_to_token_pool)
        try:
            for _ in range(2):
                draft_metadata(draft, fb)
            if device != "cpu":
                torch.cuda.synchronize(torch.device(device))
        except Exception as exc:
            yield SizeOutcome(bs, len(reqs), error=exc, past=short)
            return
        wrong = []
        for step in range(steps - 1):
            want = [0, *torch.cumsum(seq.cpu() + step + 1, 0).tolist()]
            got = draft.kv_indptr[step, : bs + 1].tolist()
            if len(got) < len(want):
                wrong.append(f"step {step}: kv_indptr's row holds {len(got)} entries, "
                             f"{len(want)} needed")
            elif got != want:
                first = next(i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b)
                wrong.append(f"step {step}: kv_indptr[{first}] = {got[first]}, "
                             f"{want[first]} expected")
        yield SizeOutcome(bs, len(reqs), past=short, wrong="; ".join(wrong))


def _pools_of(setup: Setup, fb: Any) -> None:
    """The pools a forward batch carries, as ``ForwardBatch.init_new`` takes them from the model
    runner (older releases read the KV pool from the batch, not from the backend)."""
    fb.req_to_token_pool = setup.runner.req_to_token_pool
    fb.token_to_kv_pool = setup.runner.token_to_kv_pool


def overruns(backend: Any, case: Case, bs: int, tokens: int, *, draft: int = 1) -> str:
    """What a batch of ``bs`` rows and ``tokens`` KV tokens (``draft`` tokens a request in a
    target-verify batch) would read or write past in ``backend``'s buffers ("" when nothing): the
    rows aiter's kernels address per batch row, the graph index buffer sglang's kernel fills one
    entry per token, aiter's workspace."""
    import torch

    short = []

    def rows(name: str, need: int, what: str) -> None:
        buffer = getattr(backend, name, None)
        if isinstance(buffer, torch.Tensor) and buffer.numel() < need:
            short.append(f"{what} {name} ({buffer.numel()} entries, {need} needed)")

    if case.mode == "draft-extend":  # sglang's DRAFT_EXTEND_V2 graph metadata
        rows("kv_indptr", bs + 1, "reads")
        rows("qo_indptr", bs + 1, "reads")
        if case.form == "graphs":
            rows("cuda_graph_kv_last_page_len", bs, "reads")
            rows("cuda_graph_kv_indices", tokens, "writes")
        return ", ".join(short)
    if case.mode == "verify":
        rows("kv_indptr", bs + 1, "reads")
        rows("qo_indptr", bs + 1, "reads")
        mla = bool(getattr(backend, "use_mla", False))
        unified = bool(getattr(backend, "_use_unified_verify", False))
        if not mla and not unified:
            rows("mask_indptr", bs + 1, "reads")
        if mla:
            rows("kv_last_page_len", bs, "reads")
        if case.form == "graphs" and not unified:
            rows("cuda_graph_kv_indices", tokens + (bs * draft if mla else 0), "writes")
        if case.form == "graphs" and unified:
            table = getattr(backend, "cuda_graph_page_table", None)
            if isinstance(table, torch.Tensor) and table.shape[0] < bs:
                short.append(f"writes cuda_graph_page_table ({table.shape[0]} rows, {bs} "
                             "needed)")
        return ", ".join(short)
    if case.path == "draft":  # one kv_indptr row per step, top-k entries per sequence
        width, need = int(backend.kv_indptr.shape[-1]), bs * int(backend.topk) + 1
        return (f"writes past kv_indptr's last row ({width} entries, {need} needed)"
                if width < need else "")
    rows("kv_indptr", bs + 1, "reads")
    if case.page > 1:
        rows("kv_last_page_len", bs, "reads")
    if case.path == "unified":
        rows("qo_indptr_unified_decode", bs + 1, "reads")
    if case.form == "graphs" and case.path != "unified":
        rows("cuda_graph_kv_indices", tokens, "writes")
    workspace = getattr(backend, "workspace_buffer", None)
    if case.path == "ragged" and isinstance(workspace, torch.Tensor):
        have = workspace.numel() * workspace.element_size()
        need = bs * _aiter_workspace_bytes_per_row(backend)
        if have < need:
            short.append(f"writes workspace_buffer ({have} bytes, {need} needed by aiter's "
                         "layout)")
    return ", ".join(short)


def _aiter_workspace_bytes_per_row(backend: Any) -> int:
    """aiter's ``paged_attention_ragged`` writes, per batch row, ``exp_sums`` and ``max_logits``
    (fp32) and ``tmp_out`` (query dtype, head size wide), each per head and partition."""
    import torch

    heads, parts = int(backend.num_head), int(backend.max_num_partitions)
    head = max(int(backend.head_dim), int(getattr(backend, "v_head_dim", 0) or 0))
    q_bytes = torch.empty((), dtype=backend.input_dtype).element_size()
    return heads * parts * (2 * 4 + head * q_bytes)
