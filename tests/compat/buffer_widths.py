"""Every CUDA-graph buffer of the AITER backend: its width against what sglang writes into it.

    .venv/bin/python tests/compat/buffer_widths.py                 # every supported release
    .venv/bin/python tests/compat/buffer_widths.py 0.5.11 0.5.23   # these releases

``tests/compat/batch_limits.py`` measures the batch dimension (rows). This measures the other
two ways a graph buffer goes wrong: **width** (a row of ``cuda_graph_kv_indices`` holds one entry
per page while replay writes one per token, or lacks the draft tokens a verify row adds) and
**content** (replay leaves the table the captured kernel reads as allocated).

For each release (installed beside the base environment by ``tools/with-sglang``), for upstream
``AiterAttnBackend`` / ``AiterMultiStepDraftBackend`` and ``aiter-ext``, per graph path, the
backend is built through sglang's own configuration (real ``ServerArgs`` from its parser, a real
request pool and KV pool, the graph maximum from ``get_batch_sizes_to_capture``) and sglang's own
``init_cuda_graph_state`` allocates the buffers. Then, where the path runs without ROCm, sglang's
capture-then-replay metadata code runs (its Triton kernels under ``TRITON_INTERPRET=1``) at full
context (every row as long as the longest request sglang admits, ``context_len - 1``
tokens) with the buffer followed by a guard region, so a
write past the allocation is counted instead of landing in the heap; what the kernel is handed
is compared with ``req_to_token``. Where a path needs a real draft input or aiter's compiled
metadata (target-verify, draft-extend, MLA's persistent metadata), the extent it writes is the
one its metadata code computes (``kv_indptr = cumsum(kv_lens)``) at full context: rows x per-row
width (+ draft tokens on MLA target-verify, x top-k on draft decode, with sglang's own
``draft_kv_indices_used_len`` where the release has it).

Writes ``tests/compat/buffer_widths.json`` and ``tests/compat/BUFFER_WIDTHS.md``. The test
``tests/backend/test_graph_buffers.py`` runs :func:`measure` on the installed release.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as ``python tests/compat/buffer_widths.py``
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from sglang_aiter_plugin import _releases
from tests.compat import per_release
from tests.compat.per_release import run_release

ROOT = Path(__file__).resolve().parents[2]
OUT_JSON = ROOT / "tests" / "compat" / "buffer_widths.json"
OUT_MD = ROOT / "tests" / "compat" / "BUFFER_WIDTHS.md"
DEFAULT = list(_releases.TESTED)
KINDS = ("upstream", "aiter-ext")
POOL = 8
"""Request pool P; with the plain configuration the graph maximum is 8 as well (rows are
``batch_limits.py``'s subject; here every row of the largest graph is at full context)."""
DRAFT_TOKENS = 4
DRAFT_STEPS = 3
DRAFT_TOPK = 1
GUARD = -7
WARMUP_POOL = 100
WARMUP_TP = ("--tp", "16", "--attn-dp-size", "2")
WARMUP_TP_OLD = ("--tp", "16", "--dp-size", "2", "--enable-dp-attention")
"""sglang#40668's configuration: attention-TP 8 (two DP ranks of a TP-16 server), pool 100."""


# ---------------------------------------------------------------- runs inside one release


def _guard(owner: Any, name: str, writes: int = 0) -> tuple[Any, int]:
    """Replace ``owner.name`` by a view of the same shape at the start of a larger tensor whose
    tail (room for ``writes`` entries at least) holds ``GUARD``; return the backing tensor and
    the buffer's element count."""
    import torch

    buf = getattr(owner, name)
    n = buf.numel()
    backing = torch.full((n + max(n, writes) + 4096,), GUARD, dtype=buf.dtype,
                         device=buf.device)
    backing[:n].copy_(buf.reshape(-1))
    setattr(owner, name, backing[:n].view(buf.shape))
    return backing, n


def _past(backing: Any, n: int) -> int:
    return int((backing[n:] != GUARD).sum())


def _fill_table(runner: Any) -> Any:
    """Request r's token j at KV location ``(r + 1) * width + j``: page-aligned (width is a
    multiple of 64) and never 0, so an untouched (zero) entry never matches."""
    import torch

    table = runner.req_to_token_pool.req_to_token
    rows, width = table.shape
    aligned = -(-width // 64) * 64
    values = (torch.arange(rows).view(-1, 1) + 1) * aligned + torch.arange(width).view(1, -1)
    table.copy_(values.to(table.dtype))
    return table


def _context(backend: Any) -> int:
    return int(backend.max_context_len)


def _longest(backend: Any) -> int:
    """The longest request sglang admits: ``context_len - 1`` tokens (the scheduler's
    ``max_req_len``, ``min(context_len - 1, max_total_num_tokens - 1)``, with a KV pool as large
    as a full graph batch needs)."""
    return _context(backend) - 1


def _configure(model_dir: Path, page: int, extra: tuple[str, ...] = (), pool: int = POOL) -> Any:
    from testkit.batch_paths import SCENARIOS
    from testkit.sglang_setup import configure

    flags = ("--page-size", str(page), *extra)
    return configure(model_dir, SCENARIOS["plain"], flags, pool=pool)


def _decode_row(kind: str, setup: Any, path: str, page: int, mla: bool = False) -> dict[str, Any]:
    """Capture then replay one decode graph batch at full context; measure every buffer read."""
    import torch

    from sglang_aiter_plugin.selftest.decode_batch import DecodeBatch
    from testkit.batch_paths import build_backend, graph_max

    bs = graph_max(setup)
    backend = build_backend(kind, setup, path, graphs=True)
    ctx = _longest(backend)
    table = _fill_table(setup.runner)
    unified = bool(getattr(backend, "use_triton_unified_attention", False)) or bool(
        getattr(backend, "decode_uses_page_table", False))
    name = ("cuda_graph_page_table" if unified and hasattr(backend, "cuda_graph_page_table")
            else "cuda_graph_kv_indices")
    alloc = int(getattr(backend, name).numel())
    blocks = -(-ctx // page)
    need = bs * blocks if unified else bs * ctx
    row: dict[str, Any] = dict(
        kind=kind, path=("MLA decode" if mla else f"decode ({'unified' if unified else 'ragged'})"),
        page=page, buffer=name, rows=bs, per_row=(f"{blocks} pages" if unified
                                                  else f"{ctx} tokens"),
        allocated=alloc, needed=need, ran=True)
    backing, n = _guard(backend, name, writes=bs * ctx)
    batch = DecodeBatch(backend, bs, "cpu")
    heads = backend.num_head * (getattr(backend, "head_dim", 0) or 1)
    try:
        batch.set(list(range(bs)), [1] * bs, torch.zeros(bs, heads))
        batch.metadata(in_capture=True)
        batch.set(list(range(bs)), [ctx] * bs, torch.zeros(bs, heads))
        batch.metadata(in_capture=False)
    except Exception as exc:  # the measurement
        row.update(ran=False, error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:140]}")
        return row
    row["written_past"] = _past(backing, n)
    md = backend.forward_metadata
    got = md.kv_indices
    if unified:
        want = table[:bs, :ctx]
        if page > 1:
            want = want[:, ::page] // page
        got2 = got.reshape(-1, got.shape[-1])[:bs, : want.shape[1]] if got is not None else None
        if got2 is None:
            row["content"] = "kernel handed no page table"
        else:
            bad = int((got2.to(want.dtype) != want).sum())
            row["content"] = ("right" if bad == 0 else
                              f"wrong: {bad} of {want.numel()} page-table entries differ from "
                              f"req_to_token ({int((got2 != 0).sum())} non-zero)")
    else:
        want = table[:bs, :ctx].reshape(-1)
        total = int(md.kv_indptr[bs])
        flat = backing[: max(total, 1)]
        bad = int((flat[: want.numel()].to(want.dtype) != want).sum()) if total == want.numel() \
            else -1
        row["content"] = ("right" if bad == 0 else f"wrong: kv_indptr[bs] = {total}, "
                          f"needs {want.numel()}" if bad < 0 else
                          f"wrong: {bad} of {want.numel()} entries differ from req_to_token")
    return row


def _sized_row(kind: str, backend: Any, path: str, page: int, rows: int, per_row: int,
               per_row_text: str, note: str, buffer: str = "cuda_graph_kv_indices"
               ) -> dict[str, Any]:
    alloc = int(getattr(backend, buffer).reshape(-1).numel()) if buffer.endswith("indices") \
        else int(getattr(backend, buffer).numel())
    return dict(kind=kind, path=path, page=page, buffer=buffer, rows=rows, per_row=per_row_text,
                allocated=alloc, needed=rows * per_row, ran=False, note=note)


def _spec_flags(model_dir: Path) -> tuple[str, ...]:
    return ("--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", str(model_dir),
            "--speculative-num-steps", str(DRAFT_STEPS), "--speculative-eagle-topk",
            str(DRAFT_TOPK), "--speculative-num-draft-tokens", str(DRAFT_TOKENS))


def _spec_rows(kind: str, model_dir: Path, page: int, mla: bool) -> list[dict[str, Any]]:
    """Target-verify and draft-extend of the target backend; draft decode of the wrapper."""
    from testkit.batch_paths import build_backend, graph_max

    out = []
    setup = _configure(model_dir, page, _spec_flags(model_dir))
    with setup.scope:
        bs = graph_max(setup)
        backend = build_backend(kind, setup, "ragged", graphs=False)
        d = int(backend.num_draft_tokens or 0)
        # the target-verify graph runner captures max_bs x num_draft_tokens tokens
        backend.init_cuda_graph_state(bs, bs * d)
        ctx = _longest(backend)
        arch = "MLA " if mla else ""
        if mla:
            out.append(_sized_row(kind, backend, f"{arch}target-verify", page, bs, ctx + d,
                                  f"{ctx} + {d} draft tokens",
                                  "kv_lens = seq_lens + num_draft_tokens"))
        else:
            out.append(_sized_row(kind, backend, "target-verify", page, bs, ctx, f"{ctx} tokens",
                                  "kv_lens = seq_lens"))
            mask = getattr(backend, "cuda_graph_custom_mask", None)
            if mask is not None:
                out.append(_sized_row(kind, backend, "target-verify", page, bs,
                                      d * (ctx + d), f"{d} x ({ctx} + {d}) mask bits",
                                      "seq_mask_len = d * (seq_lens + d)",
                                      buffer="cuda_graph_custom_mask"))
        out.append(_sized_row(kind, backend, f"{arch}draft-extend", page, bs, ctx,
                              f"{ctx} tokens", "kv_lens = seq_lens"))
        if not mla:
            out.append(_draft_row(kind, setup, page, bs, ctx))
    return out


def _draft_used(seq_lens_sum: int, topk: int, branches: int, steps: int) -> int:
    try:
        from sglang.srt.speculative.spec_utils import draft_kv_indices_used_len
    except ImportError:  # before 0.5.2x: the same count, written inline in common_template
        return seq_lens_sum * topk + branches * steps
    return int(draft_kv_indices_used_len(seq_lens_sum, topk, branches, steps))


def _draft_row(kind: str, setup: Any, page: int, bs: int, ctx: int) -> dict[str, Any]:
    from sglang.srt.layers.attention.aiter_backend import AiterMultiStepDraftBackend

    from sglang_aiter_plugin.backend.classes import AiterExtMultiStepDraftBackend

    cls: Any = AiterExtMultiStepDraftBackend if kind == "aiter-ext" else AiterMultiStepDraftBackend
    draft = cls(setup.runner, DRAFT_TOPK, DRAFT_STEPS)
    draft.init_cuda_graph_state(bs, bs * DRAFT_TOPK)
    width = int(draft.cuda_graph_kv_indices.shape[-1])
    # the last child step reads steps - 1 appended tokens per branch
    # the kernel writes every step's row; sglang's own capacity check counts all steps
    need = _draft_used(bs * ctx, DRAFT_TOPK, bs * DRAFT_TOPK, DRAFT_STEPS)
    return dict(kind=kind, path="EAGLE draft decode", page=page,
                buffer="draft cuda_graph_kv_indices (per step)", rows=bs,
                per_row=f"({ctx} + {DRAFT_STEPS} steps) x topk {DRAFT_TOPK}",
                allocated=width, needed=need, ran=False,
                note="draft_kv_indices_used_len(seq_lens_sum, topk, bs, num_steps)")


def _warmup_row(kind: str, model_dir: Path) -> dict[str, Any]:
    """sglang#40668: the eager dummy batch against the graph maximum and the backend's rows."""
    import contextlib
    from unittest import mock

    from testkit.batch_paths import build_backend, eager_runner_max, graph_max
    from testkit.sglang_setup import Scenario, configure

    scenario = Scenario("attention-tp8", WARMUP_TP, WARMUP_TP_OLD, 8)
    setup = configure(model_dir, scenario, (), pool=WARMUP_POOL)
    with setup.scope:
        graph = graph_max(setup)
        try:
            warm = eager_runner_max(setup)
        except Exception as exc:
            warm = None
            note = f"EagerRunner: {type(exc).__name__}"
        else:
            note = "EagerRunner._eager_max_bs" if warm is not None else "no EagerRunner"
        from sglang_aiter_plugin.backend.capacity import capacity_of

        eager = capacity_of(setup.runner).eager
        backend = build_backend(kind, setup, "ragged", graphs=True)
        holds = int(backend.kv_indptr.shape[-1]) - 1
        with contextlib.suppress(Exception), mock.patch.dict(os.environ, {}):
            holds = min(holds, int(backend.kv_last_page_len.shape[0]))
    largest = max(x for x in (graph, warm, eager) if x is not None)
    return dict(kind=kind, path="eager warm-up ceiling (attention-TP 8, P=100)", page=1,
                buffer="kv_indptr / kv_last_page_len rows", rows=largest,
                per_row=f"graph max {graph}, warm-up {warm if warm is not None else '-'}, "
                        f"MLP-sync eager {eager}",
                allocated=holds, needed=largest, ran=False, note=note)


def measure(model_dir: Path, mla_dir: Path) -> list[dict[str, Any]]:
    from sglang.srt.layers.attention import aiter_backend

    from testkit.doubles import aiter_backend_imports

    aiter_backend_imports.install(aiter_backend)
    rows: list[dict[str, Any]] = []

    def guarded(fn: Any, *args: Any, label: str) -> None:
        try:
            got = fn(*args)
        except Exception as exc:  # a path this release cannot build here: recorded, not hidden
            rows.append(dict(kind=args[0], path=label, page=None, buffer="-", rows=None,
                             per_row="-", allocated=None, needed=None, ran=False,
                             error=f"{type(exc).__name__}: {str(exc).splitlines()[0][:140]}"))
            return
        rows.extend(got if isinstance(got, list) else [got])

    for kind in KINDS:
        for page in (1, 16):
            setup = _configure(model_dir, page)
            with setup.scope:
                for path in ("ragged", "unified"):
                    guarded(_decode_row, kind, setup, path, page, label=f"decode ({path})")
            setup = _configure(mla_dir, page)
            with setup.scope:
                guarded(_decode_row, kind, setup, "ragged", page, True, label="MLA decode")
            guarded(_spec_rows, kind, model_dir, page, False, label="speculative (MHA)")
            guarded(_spec_rows, kind, mla_dir, page, True, label="speculative (MLA)")
        guarded(_warmup_row, kind, model_dir, label="eager warm-up ceiling")
    for r in rows:
        r["verdict"] = verdict(r)
    return rows


def verdict(r: dict[str, Any]) -> str:
    if r.get("error"):
        return "not measured: " + str(r["error"])
    parts = []
    if r["allocated"] is not None and r["needed"] is not None and r["needed"] > r["allocated"]:
        parts.append(f"short by {r['needed'] - r['allocated']}")
    if r.get("written_past"):
        parts.append(f"{r['written_past']} entries written past the buffer")
    content = r.get("content")
    if content and content != "right":
        parts.append(content)
    return "; ".join(parts) if parts else "right"


# ---------------------------------------------------------------- driver

CODE = """
import sys, json
sys.modules.setdefault('aiter', None)
from pathlib import Path
from testkit.sglang_setup import write_model_dir
from tests.compat.buffer_widths import measure
root = Path({tmp!r})
rows = measure(write_model_dir(root / 'model'), write_model_dir(root / 'mla', mla=True))
print('RESULT ' + json.dumps(rows))
"""


def _run_release(version: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        return run_release(version, CODE.format(tmp=tmp),
                           unset=("SGLANG_USE_AITER_UNIFIED_ATTN", "SGLANG_AITER_EXT_BOUNDS_CHECK"))


def _label(r: dict[str, Any]) -> str:
    if r["path"].startswith("eager warm-up"):
        return "eager warm-up ceiling"
    buffer = r["buffer"].replace("cuda_graph_", "").replace(" (per step)", "")
    return f"{r['path']} page {r['page']} ({buffer})"


def rerender() -> None:
    """Rewrite ``BUFFER_WIDTHS.md`` from ``buffer_widths.json`` (no measurement)."""
    data = json.loads(OUT_JSON.read_text())
    OUT_MD.write_text(_render(data["results"], data["command"], data["date"]) + "\n")


def _render(results: list[dict[str, Any]], command: str, date: str) -> str:
    out = [
        *per_release.generated(
            'CUDA-graph buffer widths and contents of the AITER backend, per release',
            "tests/compat/buffer_widths.py", command, date),
        "Tiny Llama (and a tiny DeepSeek-V2 for MLA) with real `ServerArgs` from sglang's parser,",
        f"request pool P = {POOL}, graph maximum from `get_batch_sizes_to_capture`, every row at",
        "full context: as long as the longest request sglang admits (`context_len - 1` tokens,",
        "its scheduler's `max_req_len`). `allocated`: the element count sglang's own",
        "`init_cuda_graph_state` gave the buffer; `needed`: rows x the per-row width sglang's",
        "metadata code writes at full context. `ran` = yes: sglang's capture-then-replay",
        "metadata code ran (Triton interpreted), the buffer followed by a guard region (a write",
        "past the buffer is counted there) and what the kernel is handed compared with",
        "`req_to_token`;",
        "otherwise the extent is the one that code computes (`kv_indptr = cumsum(kv_lens)`,",
        "`draft_kv_indices_used_len`). The last rows check sglang#40668's eager warm-up ceiling",
        "(attention-TP 8, P = 100) against the rows the backend holds after graph set-up.",
        "",
        "Not measured here: the sliding-window page tables (`cuda_graph_swa_page_table`,",
        "`cuda_graph_swa_out_cache_loc`: they need a hybrid SWA KV pool, which the runner double",
        "does not build; by the code, `(max_bs, ceil(context / page))` and filled on both",
        "sliding-window branches of replay), MLA's persistent-kernel metadata",
        "(`make_mla_decode_meta_data_buffer`: aiter's compiled `get_mla_metadata`), and the",
        "decode-context-parallel buffers of 0.5.20+ (`cuda_graph_verify_*`, `cuda_graph_cprr_*`,",
        "`cuda_graph_global_kv_indptr`: only with DCP). EAGLE: top-k 1, 3 steps, 4 draft tokens.",
        "",
        "## Summary: rows wrong",
        "",
        "| sglang | upstream `aiter` | `aiter-ext` |",
        "| --- | --- | --- |",
    ]
    for res in results:
        cells = []
        for kind in KINDS:
            bad = [_label(r) for r in res["rows"]
                   if r["kind"] == kind and r["verdict"] != "right"
                   and not r["verdict"].startswith("not measured")]
            cells.append(", ".join(bad) if bad else "none")
        out.append(f"| {res['release']} | {cells[0]} | {cells[1]} |")
    out.append("")
    out += per_release.release_tables(
        results, ("backend", "path", "page", "buffer", "rows x per row", "allocated", "needed",
                  "ran", "verdict"),
        lambda r: (r["kind"], r["path"], r["page"], r["buffer"], f"{r['rows']} x {r['per_row']}",
                   r["allocated"], r["needed"], "yes" if r["ran"] else "sizes", r["verdict"]))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    return per_release.main(argv, doc=__doc__ or "", script="tests/compat/buffer_widths.py",
                            default=DEFAULT, measure=_run_release, render=_render,
                            out_json=OUT_JSON, out_md=OUT_MD)


if __name__ == "__main__":
    sys.exit(main())
