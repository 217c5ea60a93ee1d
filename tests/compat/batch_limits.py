"""The largest batch sglang sends the attention backend on each path, and what each backend does.

    .venv/bin/python tests/compat/batch_limits.py                    # 7 releases, 0.5.11-0.5.23
    .venv/bin/python tests/compat/batch_limits.py 0.5.11 0.5.23      # these releases

For each release (installed beside the base environment by ``tools/with-sglang``), each
configuration (real ``ServerArgs`` from sglang's parser: DP attention at attention-TP 2 and 4,
two-batch overlap; odd and even request pools P) and each path, the size comes from the function
sglang itself uses on that path (see ``testkit/batch_paths.py``), and the metadata call
sglang makes at that size runs against upstream ``AiterAttnBackend`` /
``AiterMultiStepDraftBackend`` and against ``aiter-ext`` (sglang's Triton metadata kernels under
``TRITON_INTERPRET=1``; aiter's attention kernels cannot run here). Writes
``tests/compat/batch_limits.json`` and ``tests/compat/BATCH_LIMITS.md``.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as ``python tests/compat/batch_limits.py``
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.compat import per_release
from tests.compat.per_release import run_release

ROOT = Path(__file__).resolve().parents[2]
OUT_JSON = ROOT / "tests" / "compat" / "batch_limits.json"
OUT_MD = ROOT / "tests" / "compat" / "BATCH_LIMITS.md"
DEFAULT = ["0.5.11", "0.5.14", "0.5.15", "0.5.17", "0.5.19", "0.5.21", "0.5.23"]
SETTINGS = (("dp-attention", 33), ("dp-attention", 32), ("dp-attention-tp4", 34),
            ("two-batch-overlap", 33))
DRAFT_STEPS = 3
DRAFT_SEQ = 9


# ---------------------------------------------------------------- runs inside one release


def _graph_outcome(kind: str, setup: Any, path: str) -> str:
    """Capture-time then replay-time metadata at the largest captured batch."""
    import torch

    from sglang_aiter_plugin.backend.buffers import workspace_bytes_per_row
    from sglang_aiter_plugin.selftest.decode_batch import DecodeBatch
    from testkit.batch_paths import build_backend, graph_max

    bs = graph_max(setup)
    backend = build_backend(kind, setup, path, graphs=True)
    pool = int(setup.runner.req_to_token_pool.size)
    batch = DecodeBatch(backend, bs, "cpu")
    reqs = list(range(min(bs, pool)))
    q = torch.zeros(len(reqs), backend.num_head * backend.head_dim)
    batch.set(reqs, [5 + i for i in reqs], q)
    try:
        batch.metadata(in_capture=True)
        batch.metadata(in_capture=False)
    except Exception as exc:  # the measurement
        return f"raises {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    wrong = []
    md = backend.forward_metadata
    if path == "unified":
        qo = md.qo_indptr
        if qo is None or qo.numel() < bs + 1:
            wrong.append(f"qo_indptr {0 if qo is None else qo.numel()} entries for {bs + 1}")
    else:
        if backend.kv_last_page_len.shape[0] < bs:
            wrong.append(f"kv_last_page_len {backend.kv_last_page_len.shape[0]} rows for {bs}")
        have = backend.workspace_buffer.numel()
        need = bs * workspace_bytes_per_row(backend)
        if have < need:
            wrong.append(f"workspace_buffer {have} bytes for {need}")
    kv = md.kv_indptr
    if kv is not None and kv.numel() < bs + 1:
        wrong.append(f"kv_indptr {kv.numel()} entries for {bs + 1}")
    return "short: " + "; ".join(wrong) if wrong else "correct"


def _draft_outcome(kind: str, setup: Any) -> str:
    """The EAGLE draft graph runner's metadata call at its largest batch (topk 1)."""
    import torch
    from sglang.srt.layers.attention.aiter_backend import AiterMultiStepDraftBackend

    from sglang_aiter_plugin.backend.classes import AiterExtMultiStepDraftBackend
    from sglang_aiter_plugin.selftest.decode_batch import draft_metadata
    from testkit.batch_paths import graph_max
    from testkit.batches import draft_batch

    cls = AiterExtMultiStepDraftBackend if kind == "aiter-ext" else AiterMultiStepDraftBackend
    bs = graph_max(setup)
    draft = cls(setup.runner, 1, DRAFT_STEPS)
    draft.init_cuda_graph_state(bs, bs)
    # The same rows, at the same stride, followed by a guard region: a write past the tensor
    # lands there (and is counted) instead of in the heap.
    steps, width = draft.kv_indptr.shape
    guard = torch.full((steps * width + 4 * bs,), -7, dtype=draft.kv_indptr.dtype)
    guard[: steps * width] = draft.kv_indptr.reshape(-1)
    draft.kv_indptr = guard[: steps * width].view(steps, width)
    for step, child in enumerate(draft.attn_backends):
        child.kv_indptr = draft.kv_indptr[step]
    try:
        draft_metadata(draft, draft_batch(setup.runner, bs, "cpu", seq_len=DRAFT_SEQ))
    except Exception as exc:
        return f"raises {type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    wrong = []
    past = int((guard[steps * width :] != -7).sum())
    if past:
        wrong.append(f"{past} entries written past the tensor")
    if width < bs + 1:
        wrong.append(f"kv_indptr rows hold {width} entries for {bs + 1}")
    for step in range(DRAFT_STEPS - 1):
        want = [k * (DRAFT_SEQ + step + 1) for k in range(bs + 1)]
        got = guard[step * width : step * width + bs + 1].tolist()
        if got != want:
            first = next(i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b)
            wrong.append(f"step {step} row wrong from entry {first}")
    return "short: " + "; ".join(wrong) if wrong else "correct"


def _eager(kind: str, setup: Any, path: str, mode: str, rows: int, other: int) -> tuple[int, str]:
    from testkit.batch_paths import build_backend, check_metadata
    from testkit.batches import synced_batch

    backend = build_backend(kind, setup, path, graphs=False)
    fb = synced_batch(setup, backend, mode, rows, [other])
    if mode == "draft-extend":
        return int(fb.batch_size), "-"
    error, wrong = check_metadata(backend, fb, path)
    if error is not None:
        return int(fb.batch_size), f"raises {error}"
    return int(fb.batch_size), ("wrong: " + "; ".join(wrong)) if wrong else "correct"


def measure(model_dir: Path) -> list[dict[str, Any]]:
    import torch
    from sglang.srt.layers.attention import aiter_backend

    from sglang_aiter_plugin.backend.capacity import capacity_of, requires_mlp_sync
    from sglang_aiter_plugin.selftest.sglang_setup import graphs_off
    from testkit.batch_paths import SCENARIOS, eager_runner_max, graph_max
    from testkit.doubles import aiter_backend_imports
    from testkit.sglang_setup import configure

    aiter_backend_imports.install(aiter_backend)
    rows: list[dict[str, Any]] = []

    def add(setting: str, pool: int, path: str, size: int | None, source: str,
            upstream: str, ext: str) -> None:
        rows.append(dict(configuration=setting, pool=pool, path=path, largest=size,
                         source=source, upstream=upstream, aiter_ext=ext))

    for scenario, pool in SETTINGS:
        def setup_for(graphs: bool, scenario: str = scenario, pool: int = pool) -> Any:
            s = configure(model_dir, SCENARIOS[scenario], () if graphs else graphs_off(), pool=pool)
            table = s.runner.req_to_token_pool.req_to_token
            table.copy_(torch.arange(table.numel(), dtype=table.dtype).view_as(table) % 997)
            return s

        label = f"{scenario} P={pool}"
        with (s := setup_for(True)).scope:
            size = graph_max(s)
            cap = capacity_of(s.runner)
            for dpath in ("ragged", "unified"):
                add(label, pool, f"graph capture + replay ({dpath})", size,
                    "get_batch_sizes_to_capture", _graph_outcome("upstream", s, dpath),
                    _graph_outcome("aiter-ext", s, dpath))
            add(label, pool, "EAGLE draft graph (topk 1)", size,
                "get_batch_sizes_to_capture (draft runner)", _draft_outcome("upstream", s),
                _draft_outcome("aiter-ext", s))
            add(label, pool, "EAGLE draft-extend graph", size,
                "get_batch_sizes_to_capture (draft-extend runner)",
                "not run (needs a real draft input); same buffers as graph capture",
                "not run; same pool as graph capture")
        with (s := setup_for(False)).scope:
            eager_cases: tuple[tuple[str, str, int, int], ...] = (
                ("eager decode, full rank", "decode", pool, pool),
                ("eager decode, 1 request beside a full rank", "decode", 1, pool),
                ("eager idle beside a full rank", "idle", 0, pool),
                ("eager extend, full rank", "extend", pool, 3 * pool),
            )
            if not requires_mlp_sync(s.server_args):  # no other rank's counts reach this one
                eager_cases = (eager_cases[0], eager_cases[3])
            decode_outcomes: dict[str, tuple[int, str, str]] = {}
            for name, mode, mine, other in eager_cases:
                for dpath in ("ragged", "unified"):
                    up_size, up = _eager("upstream", s, dpath, mode, mine, other)
                    ext_size, ext = _eager("aiter-ext", s, dpath, mode, mine, other)
                    assert up_size == ext_size, (name, up_size, ext_size)
                    source = ("ForwardBatch.prepare_mlp_sync_batch"
                              if requires_mlp_sync(s.server_args) else "no MLP sync: unpadded")
                    add(label, pool, f"{name} ({dpath})", up_size, source, up, ext)
                    if mode == "decode" and mine == pool:
                        decode_outcomes[dpath] = (up_size, up, ext)
            warm = eager_runner_max(s)
            for dpath in ("ragged", "unified"):
                size_d, up, ext = decode_outcomes[dpath]
                if warm is None:
                    add(label, pool, f"eager warm-up ({dpath})", None,
                        "no EagerRunner in this release", "-", "-")
                else:
                    same = warm == size_d
                    add(label, pool, f"eager warm-up / input registry ({dpath})", warm,
                        "EagerRunner._eager_max_bs",
                        up if same else "not run", ext if same else "not run")
            try:
                size_x: int | None = _eager("aiter-ext", s, "ragged", "draft-extend", pool,
                                            3 * pool)[0]
                note = "size only"
            except Exception as exc:  # the stand-in draft input lacks what this release reads
                size_x, note = None, f"not measured ({type(exc).__name__})"
            add(label, pool, "EAGLE draft-extend, eager (MLP sync)", size_x,
                "ForwardBatch.prepare_mlp_sync_batch (DRAFT_EXTEND_V2)", note, note)
            add(label, pool, "EAGLE draft decode, eager", pool,
                "prepare_for_draft: the scheduled requests, unpadded", "<= P: fits", "fits")
        rows.append(dict(configuration=label, pool=pool, path="aiter-ext capacity at construction",
                         largest=cap.rows, source=cap.source, upstream=f"P = {pool}",
                         aiter_ext=f"{cap.rows} (eager {cap.eager}, graph {cap.graph})"))
    return rows


# ---------------------------------------------------------------- driver


def _run_release(version: str) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        code = (
            "import sys, json\nsys.modules.setdefault('aiter', None)\n"
            "from pathlib import Path\nfrom testkit.sglang_setup import write_model_dir\n"
            "from tests.compat.batch_limits import measure\n"
            f"rows = measure(write_model_dir(Path({tmp!r}) / 'model'))\n"
            "print('RESULT ' + json.dumps(rows))\n"
        )
        return run_release(version, code, unset=("SGLANG_USE_AITER_UNIFIED_ATTN",))


def _render(results: list[dict[str, Any]], command: str, date: str) -> str:
    out = [
        *per_release.generated(
            'Largest batch sglang sends the attention backend, per path',
            "tests/compat/batch_limits.py", command, date),
        "Each size is what sglang's own function on that path returns for real `ServerArgs`",
        "(sglang's CLI parser) and a real request pool of P requests; each outcome is the",
        "metadata call sglang makes at that size, run on sglang's own backend code with its",
        "Triton metadata kernels interpreted on the CPU (aiter's attention kernels do not run",
        "here; the eager decode, idle and extend rows were also run on an H200 under",
        "compute-sanitizer: `gpu/results/eager_batches.md`). `dp-attention` is",
        "`--tp 4 --attn-dp-size 2` (or",
        "`--dp-size 2 --enable-dp-attention`), attention-TP 2; `dp-attention-tp4` is `--tp 8`",
        "with 2 DP ranks, attention-TP 4. Eager rows run with decode CUDA graphs off.",
        "",
        "`raises`: the metadata call fails with that error (a server crashes on that batch).",
        "`short`/`wrong`: it returns, but what the kernel is handed describes fewer rows than",
        "the batch or is wrong. `correct`: every cumulative length handed on is the batch's own.",
        "",
        "## Summary (rows measured, per release)",
        "",
        "| sglang | rows | upstream raises | upstream short or wrong | aiter-ext not correct |",
        "| --- | --- | --- | --- | --- |",
    ]
    for res in results:
        measured = [r for r in res["rows"] if r["upstream"].startswith(
            ("raises", "short", "wrong", "correct"))]
        out.append(
            f"| {res['release']} | {len(measured)} | "
            f"{sum(r['upstream'].startswith('raises') for r in measured)} | "
            f"{sum(r['upstream'].startswith(('short', 'wrong')) for r in measured)} | "
            f"{sum(not r['aiter_ext'].startswith('correct') for r in measured)} |")
    out.append("")
    out += per_release.release_tables(
        results, ("configuration", "path", "largest batch", "from", "upstream `aiter`",
                  "`aiter-ext`"),
        lambda r: (r["configuration"], r["path"], r["largest"], r["source"], r["upstream"],
                   r["aiter_ext"]))
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    return per_release.main(argv, doc=__doc__ or "", script="tests/compat/batch_limits.py",
                            default=DEFAULT, measure=_run_release, render=_render,
                            out_json=OUT_JSON, out_md=OUT_MD)


if __name__ == "__main__":
    sys.exit(main())
