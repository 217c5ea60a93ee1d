"""GPU evidence with aiter's real Triton ``unified_attention`` in place of the reference kernel.

``unified_attention`` is Triton, so it runs on an NVIDIA GPU without ROCm; it is loaded from an
aiter source tree (``--aiter-tree``: a folder holding ``aiter/`` and an ``AITER_ORIGIN`` line
naming the tree and commit) by ``testkit/doubles/aiter_triton.py``. ``paged_attention_ragged`` and
``mha_batch_prefill_func`` are compiled HIP/CK in aiter, with no Triton twin: the unified paths
exercised here never call them, and ``testkit/doubles/aiter_gpu_kernels.py`` still stands in for
them.

For each backend (``aiter-ext`` and upstream ``AiterAttnBackend``), built through sglang's own
configuration with a request pool P whose captured ``max_bs`` exceeds it, on sglang's unified
paths (``SGLANG_USE_AITER_UNIFIED_ATTN=1``):

1. ``graphs`` / ``eager``: unified decode at every captured batch size, captured in a CUDA graph
   and replayed with real requests (``eager``: the same metadata calls, no graph, for
   ``compute-sanitizer``); every real row against a torch reference;
2. ``extend``: a unified extend batch after graph set-up (``init_forward_metadata`` and
   ``forward_extend``);
3. ``verify`` / ``verify-eager``: EAGLE target-verify batches (topk 1, 4 draft tokens) at every
   captured size through the graph metadata call and ``forward_extend``, with and without a graph;
4. ``contract``: the kernel alone, handed a ``cu_seqlens_q`` of exactly ``seqs`` entries (one
   short) in its own allocation, decode-shaped (2D and 3D kernel) and extend-shaped, each after
   a control call with ``seqs + 1`` entries. Under memcheck this shows which calls read past it.

Prints one ``RESULT {json}`` line per result; the exit status is 0 whatever the results.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Any

import torch

from gpu import buffer_pool_graphs as bpg  # blocks aiter first
from sglang_aiter_plugin.selftest.decode_batch import Batch
from sglang_aiter_plugin.selftest.reference import fill_paged_requests, make_layer, reference_rows
from testkit.doubles.aiter_triton import LoadedKernel, loaded, tree_at
from testkit.sglang_setup import SCENARIOS, configure, write_model_dir

emit = bpg.emit
DRAFT = 4
TOLERANCE = 2e-2  # bf16


class Recorder:
    """Passes every call to the kernel; records what eager calls were handed."""

    def __init__(self, kernel: Any) -> None:
        self.kernel = kernel
        self.calls: list[dict[str, Any]] = []

    def __call__(self, **kw: Any) -> Any:
        if not (kw["q"].is_cuda and torch.cuda.is_current_stream_capturing()):
            self.calls.append({
                "seqs": kw["seqused_k"].numel(), "handed": kw["cu_seqlens_q"].numel(),
                "max_seqlen_q": int(kw["max_seqlen_q"]), "max_seqlen_k": int(kw["max_seqlen_k"]),
                "block_table": list(kw["block_table"].shape),
            })
        return self.kernel(**kw)


def run_extend_unified(kind: str, setup: Any, rec: Recorder, device: str, lens: str) -> None:
    """``lens``: ``PREFIXES/EXTENDS`` of the three requests, e.g. ``5,0,12/7,3,9``."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    backend = bpg.build(kind, setup, "unified")
    layer = make_layer(backend)
    prefix, extend = ([int(x) for x in part.split(",")] for part in lens.split("/"))
    reqs = [3, 17, 30]
    seq = [p + e for p, e in zip(prefix, extend, strict=True)]
    n = sum(extend)
    def t(xs: list[int], dt: torch.dtype = torch.int64) -> torch.Tensor:
        return torch.tensor(xs, dtype=dt, device=device)

    fb = Batch(
        batch_size=3, req_pool_indices=t(reqs), seq_lens=t(seq), seq_lens_cpu=t(seq).cpu(),
        seq_lens_sum=sum(seq), forward_mode=ForwardMode.EXTEND, spec_info=None,
        extend_prefix_lens=t(prefix, torch.int32), extend_prefix_lens_cpu=prefix,
        extend_seq_lens=t(extend, torch.int32), extend_seq_lens_cpu=extend,
        extend_start_loc=t([0, extend[0], extend[0] + extend[1]], torch.int32),
        encoder_lens=None, out_cache_loc=None,
        input_ids=torch.zeros(n, dtype=torch.int64, device=device), positions=None,
        kv_loc_plan=None, attn_backend=backend, mrope_positions=None, return_logprob=False,
        extend_num_tokens=n, extend_input_logprob_token_ids_gpu=None, capture_hidden_mode=None,
        padded_static_len=-1, num_token_non_padded=None, can_run_dp_cuda_graph=False,
    )
    q = torch.randn(n, backend.num_head, backend.head_dim,
                    generator=torch.Generator().manual_seed(2)).to(backend.input_dtype).to(device)
    rec.calls.clear()
    backend.init_forward_metadata(fb)
    out = backend.forward_extend(q.reshape(n, -1), None, None, layer, fb, save_kv_cache=False)
    _sync(device)
    rows = [r for r, e in zip(reqs, extend, strict=True) for _ in range(e)]
    visible = [p + i + 1 for p, e in zip(prefix, extend, strict=True) for i in range(e)]
    err = _row_errors(setup, out, q, rows, visible, backend)
    emit(part="extend", kind=kind, max_bs=setup.max_bs, prefix=prefix, extend=extend,
         calls=rec.calls[-1:],
         rows_right=f"{int((err < TOLERANCE).sum())}/{n}", max_abs_err=round(float(err.max()), 5))


def run_verify(kind: str, setup: Any, pool: int, rec: Recorder, graphs: bool, device: str) -> None:
    """Target-verify batches at every captured size, metadata through the graph call."""
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    backend = bpg.build(kind, setup, "unified")
    layer = make_layer(backend)
    gen = torch.Generator().manual_seed(3)
    fill = backend.get_cuda_graph_seq_len_fill_value()
    for bs in setup.capture_bs:
        n = min(bs, pool)
        reqs = torch.randperm(pool, generator=gen)[:n].tolist()
        lens = torch.randint(1, bpg.MAX_LEN, (n,), generator=gen).tolist()
        req_idx = torch.zeros(bs, dtype=torch.int64, device=device)
        seq_lens = torch.full((bs,), fill, dtype=torch.int64, device=device)
        q_static = torch.zeros(bs * DRAFT, backend.num_head * backend.head_dim,
                               dtype=backend.input_dtype, device=device)
        fb = Batch(batch_size=bs, forward_mode=ForwardMode.TARGET_VERIFY, req_pool_indices=req_idx,
                   seq_lens=seq_lens, seq_lens_cpu=seq_lens.cpu(), seq_lens_sum=int(fill * bs),
                   input_ids=torch.zeros(bs * DRAFT, dtype=torch.int64, device=device),
                   spec_info=None, out_cache_loc=None, positions=None, encoder_lens=None,
                   kv_loc_plan=None)

        def forward(fb: Any = fb, q_static: torch.Tensor = q_static) -> torch.Tensor:
            out: torch.Tensor = backend.forward_extend(
                q_static, None, None, layer, fb, save_kv_cache=False
            )
            return out

        if graphs:
            backend.init_forward_metadata_out_graph(fb, in_capture=True)
            forward()
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                out = forward()
        req_idx.copy_(torch.tensor(reqs + [0] * (bs - n)))
        seq_lens.copy_(torch.tensor(lens + [fill] * (bs - n)))
        fb.seq_lens_cpu = seq_lens.cpu()
        fb.seq_lens_sum = int(fb.seq_lens_cpu.sum())
        q = torch.randn(n * DRAFT, backend.num_head, backend.head_dim, generator=gen)
        q_static.zero_()
        q_static[: n * DRAFT].copy_(q.reshape(n * DRAFT, -1).to(backend.input_dtype))
        rec.calls.clear()
        backend.init_forward_metadata_out_graph(fb, in_capture=False)
        if graphs:
            graph.replay()
        else:
            out = forward()
        _sync(device)
        rows = [r for r in reqs for _ in range(DRAFT)]
        visible = [ln + j + 1 for ln in lens for j in range(DRAFT)]
        err = _row_errors(setup, out[: n * DRAFT], q.to(backend.input_dtype).to(device), rows,
                          visible, backend)
        emit(part="verify", kind=kind, graphs=graphs, bs=bs, max_bs=setup.max_bs,
             real_rows=n * DRAFT, calls=rec.calls[-1:],
             qo_indptr_entries=int(backend.forward_metadata.qo_indptr.numel()),
             rows_right=f"{int((err < TOLERANCE).sum())}/{n * DRAFT}",
             max_abs_err=round(float(err.max()), 5))


def run_contract(kernel: LoadedKernel, shape: str) -> None:
    """The kernel alone with ``cu_seqlens_q`` in its own allocation: ``seqs + 1`` entries
    (control), then ``seqs`` entries (one short)."""
    if not torch.cuda.is_available():
        raise SystemExit("contract needs a GPU: on CPU a short tensor lets the interpreter "
                         "write past out (use tests/backend/test_unified_kernel.py there)")
    gen = torch.Generator().manual_seed(4)
    heads, kv_heads, dim, page, dtype = 4, 2, 64, 16, torch.bfloat16
    seqs, max_k = {"decode-2d": (34, 512), "decode-3d": (34, 2048), "extend": (3, 512)}[shape]
    q_lens = [1] * seqs if shape.startswith("decode") else [7, 3, 9]
    k_lens = torch.randint(max(q_lens), max_k + 1, (seqs,), generator=gen)
    blocks = max_k // page
    k = torch.randn(seqs * blocks + 1, page, kv_heads, dim, generator=gen).to(dtype).cuda()
    v = torch.randn(k.shape, generator=gen).to(dtype).cuda()
    table = torch.randperm(seqs * blocks, generator=gen).view(seqs, blocks).int().cuda()
    q = torch.randn(sum(q_lens), heads, dim, generator=gen).to(dtype).cuda()
    cu = torch.tensor([0, *torch.tensor(q_lens).cumsum(0).tolist()], dtype=torch.int32)
    module = kernel.module
    two_d = module.use_2d_kernel(dim, 0, max(q_lens) == 1, max(q_lens), max_k,
                                 module.get_num_sms() * 4, seqs * kv_heads)
    for label, entries in (("control", seqs + 1), ("short", seqs)):
        cu_seqlens_q = cu[:entries].clone().cuda()  # its own allocation, nothing after it
        out = torch.empty_like(q)
        kernel.unified_attention(
            q=q, k=k, v=v, out=out, cu_seqlens_q=cu_seqlens_q, max_seqlen_q=max(q_lens),
            seqused_k=k_lens.int().cuda(), max_seqlen_k=max_k, softmax_scale=dim**-0.5,
            causal=True, window_size=(-1, -1), block_table=table, softcap=0.0, q_descale=None,
            k_descale=None, v_descale=None,
        )
        torch.cuda.synchronize()
        emit(part="contract", shape=shape, call=label, seqs=seqs, cu_seqlens_q_entries=entries,
             max_seqlen_q=max(q_lens), max_seqlen_k=max_k, kernel="2d" if two_d else "3d",
             origin=kernel.tree.origin)


def _row_errors(setup: Any, out: torch.Tensor, q: torch.Tensor, rows: list[int],
                visible: list[int], backend: Any) -> torch.Tensor:
    got = out[: len(rows)].reshape(len(rows), backend.num_head, backend.head_dim).float()
    want = reference_rows(setup.runner, q.reshape(len(rows), backend.num_head, -1), rows, visible)
    return (got - want.to(got.device)).abs().flatten(1).amax(dim=1).cpu()


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--aiter-tree", required=True,
                        help="folder holding aiter/ and AITER_ORIGIN (tree and commit)")
    parser.add_argument("--parts", default="graphs,extend,verify")
    parser.add_argument("--kinds", default="aiter-ext,upstream")
    parser.add_argument("--contract", default="decode-2d,decode-3d,extend",
                        help="shapes for --parts contract")
    parser.add_argument("--extend-lens", default="5,0,12/7,3,9",
                        help="prefix and extend lengths of the extend batch's three requests")
    parser.add_argument("--scenario", default="two-batch-overlap")
    parser.add_argument("--pool", type=int, default=33)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16",
                        help="model dtype (float16 for a CPU check: the interpreter's bf16 dot "
                        "is wrong)")
    args = parser.parse_args()
    mod = bpg.install_kernel_doubles()
    with loaded(tree_at(args.aiter_tree)) as kernel:
        rec = Recorder(kernel.unified_attention)
    mod.unified_attention = rec
    import sglang
    import triton

    emit(part="versions", sglang=sglang.__version__, torch=torch.__version__,
         triton=triton.__version__, aiter=kernel.tree.origin, kernel_module=kernel.module.__name__,
         gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else None)
    parts = args.parts.split(",")
    if "contract" in parts:
        for shape in args.contract.split(","):
            run_contract(kernel, shape)
        return
    model_dir = write_model_dir(Path(os.environ.get("TMPDIR", "/tmp")) / "tiny-llama-unified")
    setup = configure(model_dir, SCENARIOS[args.scenario],
                          (*bpg.FLAGS, "--dtype", args.dtype), device=args.device, pool=args.pool)
    fill_paged_requests(setup.runner, args.pool, bpg.PAGE, seed=0)
    emit(part="config", scenario=args.scenario, pool=args.pool, capture_bs=setup.capture_bs,
         max_bs=setup.max_bs)
    with setup.scope:
        for kind in args.kinds.split(","):
            for part in parts:
                try:
                    if part in ("graphs", "eager"):
                        rec.calls.clear()
                        bpg.run_decode(kind, "unified", setup, args.pool, part == "graphs",
                                       args.device)
                        emit(part=f"{part}-calls", kind=kind, calls=rec.calls)
                    elif part == "extend":
                        run_extend_unified(kind, setup, rec, args.device, args.extend_lens)
                    elif part in ("verify", "verify-eager"):
                        run_verify(kind, setup, args.pool, rec, part == "verify", args.device)
                except Exception as exc:
                    emit(part=part, kind=kind, error=f"{type(exc).__name__}: {exc}"[:500])


if __name__ == "__main__":
    main()
