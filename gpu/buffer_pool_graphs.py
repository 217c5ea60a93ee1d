"""GPU evidence for the aiter-ext buffer pool, against the real sglang backend code.

For each backend (``aiter-ext`` and upstream ``AiterAttnBackend``) and decode path (ragged paged
decode, unified page-table decode), built through sglang's own configuration with a request pool
P whose captured ``max_bs`` exceeds it:

1. ``graphs``: capture a decode CUDA graph at every captured batch size with sglang's own metadata
   code (its Triton kv-indices kernel), replay it with real requests (padded as sglang pads), and
   compare every real row with a torch reference computed from the request table.
2. ``extend``: then an extend batch through the real ``init_forward_metadata``/``forward_extend``;
   record the ``cu_seqlens_q``/``kv_indptr`` handed to ``mha_batch_prefill_func`` and compare.
3. ``eager``: the same decode steps without graphs (for ``compute-sanitizer`` with
   ``PYTORCH_NO_CUDA_MEMORY_CACHING=1``), plus the block-size-16 reading of ``kv_last_page_lens``.

aiter's kernels are replaced by ``testkit/doubles/aiter_gpu_kernels.py`` (same per-row memory
contract).
Prints one JSON line per result; the exit status is 0 whatever the results (they are evidence).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.modules["aiter"] = None  # type: ignore[assignment]
ROOT = Path(__file__).resolve().parent.parent


def _tolerate_transformers_reregistration() -> None:
    """sglang 0.5.11-0.5.15 register ``qwen3_asr`` that newer transformers already has."""
    import transformers

    original = transformers.AutoConfig.register

    def register(model_type: str, config: Any, exist_ok: bool = False) -> None:
        original(model_type, config, exist_ok=True)

    transformers.AutoConfig.register = register  # type: ignore[method-assign]


_tolerate_transformers_reregistration()

import torch  # noqa: E402

from sglang_aiter_plugin.selftest.cases import Case  # noqa: E402
from sglang_aiter_plugin.selftest.checks import TOLERANCE  # noqa: E402
from sglang_aiter_plugin.selftest.decode import (  # noqa: E402
    build_backend,
    graph_sizes,
    requests_for,
)
from sglang_aiter_plugin.selftest.decode_batch import (  # noqa: E402
    DecodeBatch,
    draft_metadata,
)
from sglang_aiter_plugin.selftest.reference import (  # noqa: E402
    fill_paged_requests,
    make_layer,
    reference_rows,
)
from testkit.batches import RecordingBatch, draft_batch  # noqa: E402
from testkit.doubles import aiter_backend_imports  # noqa: E402
from testkit.doubles import aiter_gpu_kernels as ref  # noqa: E402
from testkit.sglang_setup import SCENARIOS, configure, write_model_dir  # noqa: E402

PAGE = 16
MAX_LEN = int(os.environ.get("POOL_GPU_MAX_LEN", "600"))
FLAGS = ("--page-size", str(PAGE))


def emit(**record: Any) -> None:
    print("RESULT " + json.dumps(record), flush=True)


def install_kernel_doubles() -> Any:
    from sglang.srt.layers.attention import aiter_backend as mod

    mod.paged_attention_ragged = ref.paged_attention_ragged
    mod.unified_attention = ref.unified_attention
    mod.mha_batch_prefill_func = ref.mha_batch_prefill_func
    aiter_backend_imports.install(mod)
    return mod


def build(kind: str, setup: Any, path: str) -> Any:
    os.environ["SGLANG_USE_AITER_UNIFIED_ATTN"] = "1" if path == "unified" else "0"
    if kind == "aiter-ext":
        from sglang_aiter_plugin.backend.classes import AiterExtAttnBackend as cls
    else:
        from sglang.srt.layers.attention.aiter_backend import AiterAttnBackend as cls
    backend = cls(setup.runner)
    backend.init_cuda_graph_state(setup.max_bs, setup.max_bs)
    return backend


def decode_rows(
    setup: Any, pool: int, bs: int, gen: torch.Generator
) -> tuple[list[int], list[int]]:
    return requests_for(bs, pool, gen, MAX_LEN)


def run_decode(kind: str, path: str, setup: Any, pool: int, graphs: bool, device: str) -> None:
    """The self-test's decode loop (``graph_sizes``) at every captured size, nothing held back;
    one record per size."""
    os.environ["SGLANG_USE_AITER_UNIFIED_ATTN"] = "1" if path == "unified" else "0"
    case = Case(f"{path}-page{PAGE}-graphs", path, PAGE, "graphs")
    for size in graph_sizes(case, setup, build_backend(kind, setup), device, seed=1,
                            max_len=MAX_LEN, hold=lambda _: False, capture=graphs):
        record: dict[str, Any] = dict(part="decode", kind=kind, path=path, graphs=graphs,
                                      pool=pool, bs=size.bs, max_bs=setup.max_bs,
                                      real_rows=size.real_rows)
        if size.error is not None:
            emit(**record, error=f"{type(size.error).__name__}: {size.error}"[:300])
            return
        err = size.max_err if size.max_err is not None else float("nan")
        emit(**record, max_abs_err=round(err, 5), ok=bool(err < TOLERANCE))


def run_extend(kind: str, setup: Any, pool: int, device: str) -> None:
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    backend = build(kind, setup, "ragged")
    layer = make_layer(backend)
    prefix, extend = [5, 0, 12], [7, 3, 9]
    seq = [p + e for p, e in zip(prefix, extend, strict=False)]
    reqs = [3, 17, 30]
    t = lambda xs, dt=torch.int64: torch.tensor(xs, dtype=dt, device=device)  # noqa: E731
    n_tok = sum(extend)
    fb = RecordingBatch(
        batch_size=3, req_pool_indices=t(reqs), seq_lens=t(seq), seq_lens_cpu=t(seq).cpu(),
        seq_lens_sum=sum(seq), forward_mode=ForwardMode.EXTEND, spec_info=None,
        extend_prefix_lens=t(prefix, torch.int32), extend_prefix_lens_cpu=prefix,
        extend_seq_lens=t(extend, torch.int32), extend_seq_lens_cpu=extend,
        extend_start_loc=t([0, 7, 10], torch.int32), encoder_lens=None, out_cache_loc=None,
        input_ids=torch.zeros(n_tok, dtype=torch.int64, device=device), positions=None,
        kv_loc_plan=None, attn_backend=backend, mrope_positions=None, return_logprob=False,
        extend_num_tokens=n_tok, extend_input_logprob_token_ids_gpu=None, capture_hidden_mode=None,
        padded_static_len=-1, num_token_non_padded=None, can_run_dp_cuda_graph=False,
    )
    gen = torch.Generator().manual_seed(2)
    q = torch.randn(n_tok, backend.num_head, backend.head_dim, generator=gen).to(
        backend.input_dtype
    ).to(device)
    ref.CALLS.clear()
    try:
        backend.init_forward_metadata(fb)
        out = backend.forward_extend(
            q.reshape(n_tok, -1), None, None, layer, fb, save_kv_cache=False
        )
    except Exception as exc:  # evidence, not a crash: record what happened
        import traceback

        emit(part="extend", kind=kind, pool=pool, error=f"{type(exc).__name__}: {exc}"[:300],
             where=traceback.format_exc().splitlines()[-6:-1])
        return
    call = ref.CALLS[-1] if ref.CALLS else {}
    got = out.reshape(n_tok, backend.num_head, backend.head_dim).float()
    rows_right, start = 0, 0
    for r, p, e in zip(reqs, prefix, extend, strict=False):
        for i in range(e):
            want = reference_rows(setup.runner, q[start + i : start + i + 1], [r], [p + i + 1])
            rows_right += int((got[start + i] - want[0].to(got.device)).abs().max().item() < 2e-2)
        start += e
    true_q = [0, 7, 10, 19]
    true_kv = [0, seq[0], seq[0] + seq[1], sum(seq)]
    emit(part="extend", kind=kind, pool=pool, max_bs=setup.max_bs,
         cu_seqlens_q=call.get("cu_seqlens_q"), kv_indptr=call.get("kv_indptr"),
         true_cu_seqlens_q=true_q, true_kv_indptr=true_kv,
         ok=call.get("cu_seqlens_q") == true_q and call.get("kv_indptr") == true_kv,
         rows_right=f"{rows_right}/{n_tok}",
         fields_read_as_none=sorted(RecordingBatch.defaulted))


def run_last_page_len(kind: str, setup: Any, pool: int, device: str) -> None:
    """Block size 16: aiter reads kv_last_page_lens[s] for every row; hand it the backend's."""
    backend = build(kind, setup, "ragged")
    bs = setup.max_bs
    n_pages = [2] * bs
    kv_indptr = torch.arange(0, 2 * bs + 1, 2, dtype=torch.int32, device=device)
    pages = torch.arange(1, 2 * bs + 1, dtype=torch.int32, device=device)
    k, v = setup.runner.token_to_kv_pool.get_kv_buffer(0)
    q = torch.randn(bs, backend.num_head, backend.head_dim, device=device).to(backend.input_dtype)
    out = torch.empty_like(q)
    ref.paged_attention_ragged(
        out, backend.workspace_buffer, q, k.view(-1, PAGE, *k.shape[1:]),
        v.view(-1, PAGE, *v.shape[1:]), backend.scale, kv_indptr, pages,
        backend.kv_last_page_len, PAGE, backend.max_num_partitions,
    )
    if device == "cuda":
        torch.cuda.synchronize()
    emit(part="last_page_len_block16", kind=kind, pool=pool, bs=bs, pages=sum(n_pages),
         kv_last_page_len_entries=int(backend.kv_last_page_len.numel()))


def run_above_max(kind: str, path: str, setup: Any, pool: int, device: str) -> None:
    """One metadata call at ``max_bs + 2`` after graph set-up: what no sglang runner sends.

    ``path`` is ``ragged``/``unified`` (the decode backend) or ``draft`` (the multi-step draft
    wrapper, topk 1, 3 steps). ``SGLANG_AITER_EXT_BOUNDS_CHECK`` in the environment decides
    whether the ``aiter-ext`` classes check the batch size.
    """
    bs = setup.max_bs + 2
    if path == "draft":
        if kind == "aiter-ext":
            from sglang_aiter_plugin.backend.classes import AiterExtMultiStepDraftBackend as dcls
        else:
            from sglang.srt.layers.attention.aiter_backend import AiterMultiStepDraftBackend as dcls
        target = dcls(setup.runner, 1, 3)
        target.init_cuda_graph_state(setup.max_bs, setup.max_bs)
        fb = draft_batch(setup.runner, bs, device)

        def call() -> None:
            draft_metadata(target, fb)

        watched = ["kv_indptr"]
    else:
        target = build(kind, setup, path)
        batch = DecodeBatch(target, bs, device)
        reqs, lens = decode_rows(setup, pool, bs, torch.Generator().manual_seed(2))
        batch.set(reqs, lens, torch.zeros(len(reqs), target.num_head * target.head_dim))

        def call() -> None:
            batch.metadata(in_capture=False)

        watched = [n for n in ("kv_indptr", "kv_last_page_len", "qo_indptr_unified_decode",
                               "cuda_graph_kv_indices", "cuda_graph_page_table")
                   if isinstance(getattr(target, n, None), torch.Tensor)]
    before = {n: getattr(target, n).clone() for n in watched}
    try:
        call()
        error = None
    except Exception as exc:
        error = f"{type(exc).__name__}: {exc}"[:300]
    if device == "cuda":
        torch.cuda.synchronize()
    changed = [n for n in watched if not torch.equal(before[n], getattr(target, n))]
    record: dict[str, Any] = {}
    if path == "draft":
        record["row_starts"] = target.kv_indptr[:, 0].tolist()  # must stay 0
    emit(part="above", kind=kind, path=path, pool=pool, max_bs=setup.max_bs, bs=bs,
         check=os.environ.get("SGLANG_AITER_EXT_BOUNDS_CHECK", ""), error=error,
         changed=changed, **record)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--parts", default="graphs,extend")
    parser.add_argument("--kinds", default="aiter-ext,upstream")
    parser.add_argument("--paths", default="ragged,unified")
    parser.add_argument("--scenario", default="two-batch-overlap")
    parser.add_argument("--pool", type=int, default=33)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    mod = install_kernel_doubles()
    import sglang

    emit(part="versions", sglang=sglang.__version__, torch=torch.__version__,
         triton=__import__("triton").__version__, backend_module=mod.__file__,
         gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else None)
    model_dir = write_model_dir(Path(tempfile.mkdtemp()) / "tiny-llama")
    setup = configure(model_dir, SCENARIOS[args.scenario], FLAGS, device=args.device,
                      pool=args.pool)
    fill_paged_requests(setup.runner, args.pool, PAGE, seed=0)
    emit(part="config", scenario=args.scenario, pool=args.pool, capture_bs=setup.capture_bs,
         max_bs=setup.max_bs)
    parts = args.parts.split(",")
    with setup.scope:
        for kind in args.kinds.split(","):
            for part in parts:
                try:
                    if part in ("graphs", "eager"):
                        for path in args.paths.split(","):
                            run_decode(kind, path, setup, args.pool, part == "graphs", args.device)
                    elif part == "extend":
                        run_extend(kind, setup, args.pool, args.device)
                    elif part == "block16":
                        run_last_page_len(kind, setup, args.pool, args.device)
                    elif part == "above":
                        for path in args.paths.split(","):
                            run_above_max(kind, path, setup, args.pool, args.device)
                except Exception as exc:
                    emit(part=part, kind=kind, error=f"{type(exc).__name__}: {exc}"[:500])


if __name__ == "__main__":
    main()
