"""GPU evidence for the width and the content of the decode graph buffers, against sglang's code.

Two parts, each for upstream ``AiterAttnBackend`` and ``aiter-ext``, built through sglang's own
configuration (real ``ServerArgs``, real pools, graph sizes from ``get_batch_sizes_to_capture``):

* ``width``: ``--page-size 16``, ragged decode. A decode graph is captured at the largest batch
  and replayed with every row near full context; sglang's own Triton kernel
  (``create_flashinfer_kv_indices_triton``) writes one kv index per token into
  ``cuda_graph_kv_indices``. On 0.5.11-0.5.12.post1 upstream sizes that buffer per page: run
  under ``compute-sanitizer --tool memcheck`` with ``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` (every
  tensor its own allocation) the write past it is reported in sglang's kernel. The attention
  kernel is ``testkit/doubles/aiter_gpu_kernels.py``'s ``paged_attention_ragged`` (aiter's memory
  contract);
  every real row is compared with a torch reference over ``req_to_token``.
* ``unified``: page size 1, no sliding window, ``SGLANG_USE_AITER_UNIFIED_ATTN=1``, with aiter's
  real Triton ``unified_attention`` (``--aiter-tree``, loaded by ``testkit/doubles/aiter_triton``).
  A decode graph is captured, then replayed with real requests; its output is compared with an
  eager reference (torch attention over each request's first ``seq_len`` tokens of
  ``req_to_token``) and the page table the kernel read with ``req_to_token``.

Prints one ``RESULT {json}`` line per result; the exit status is 0 whatever the results.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

import torch


def _tolerate_missing_sgl_kernel_ops() -> None:
    """sglang 0.5.12 registers fake implementations for ``sgl_kernel::`` operators at import;
    the carried ``sgl_kernel`` is an import stub that defines none of them (none is called on
    the paths run here), so those registrations are skipped."""
    original = torch.library.register_fake

    def register_fake(op: Any, func: Any = None, /, **kw: Any) -> Any:
        if isinstance(op, str) and op.startswith("sgl_kernel::"):
            return func if func is not None else (lambda f: f)
        return original(op, func, **kw) if func is not None else original(op, **kw)

    torch.library.register_fake = register_fake  # type: ignore[assignment]


_tolerate_missing_sgl_kernel_ops()

from gpu import buffer_pool_graphs as bpg  # noqa: E402  (blocks aiter first)
from sglang_aiter_plugin.selftest.decode_batch import DecodeBatch  # noqa: E402
from sglang_aiter_plugin.selftest.reference import (  # noqa: E402
    fill_paged_requests,
    make_layer,
    reference_rows,
)
from testkit.doubles.aiter_triton import MIN_TILE, tiles_of_at_least_16  # noqa: E402
from testkit.sglang_setup import SCENARIOS, configure, write_model_dir  # noqa: E402

emit = bpg.emit
TOLERANCE = 2e-2  # bf16


def _backend(kind: str, setup: Any, unified: bool) -> Any:
    os.environ["SGLANG_USE_AITER_UNIFIED_ATTN"] = "1" if unified else "0"
    if kind == "aiter-ext":
        from sglang_aiter_plugin.backend.classes import AiterExtAttnBackend as cls
    else:
        from sglang.srt.layers.attention.aiter_backend import AiterAttnBackend as cls
    backend = cls(setup.runner)
    backend.init_cuda_graph_state(setup.max_bs, setup.max_bs)
    return backend


def replay(kind: str, setup: Any, pool: int, unified: bool, lens: list[int], device: str,
           graphs: bool = True) -> dict[str, Any]:
    """Capture at ``max_bs`` (metadata at the capture fill), replay with ``lens`` real rows.

    Without ``graphs`` the same metadata calls run (capture-time, then replay-time, where sglang's
    kv-indices kernel writes) and the forward runs eagerly on the replayed state: what
    ``compute-sanitizer`` needs, since with ``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` an allocation
    inside a graph capture invalidates it."""
    backend = _backend(kind, setup, unified)
    layer = make_layer(backend)
    bs = setup.max_bs
    reqs = list(range(len(lens)))
    gen = torch.Generator().manual_seed(3)
    q = torch.randn(len(reqs), backend.num_head, backend.head_dim, generator=gen).to(
        backend.input_dtype).to(device)
    batch = DecodeBatch(backend, bs, device)
    # 0.5.11-0.5.13 read the KV pool through the batch (later releases through the backend)
    batch.fb.token_to_kv_pool = setup.runner.token_to_kv_pool
    batch.fb.req_to_token_pool = setup.runner.req_to_token_pool
    captured = batch.capture(layer) if device == "cuda" and graphs else None
    if captured is None:  # the same calls without a graph: the forward reads the replayed state
        batch.metadata(in_capture=True)
    out = batch.run(layer, reqs, lens, q, captured)
    if device == "cuda":
        torch.cuda.synchronize()
    got = out[: len(reqs)].reshape(len(reqs), backend.num_head, backend.head_dim).float()
    want = reference_rows(setup.runner, q, reqs, lens).to(got.device)
    diff = (got - want).abs().flatten(1).amax(dim=1)
    record: dict[str, Any] = dict(
        kind=kind, graphs=graphs and device == "cuda", bs=bs, real_rows=len(reqs), pool=pool,
        lens_min=min(lens), lens_max=max(lens), max_abs_diff=round(float(diff.max()), 5),
        rows_right=int((diff < TOLERANCE).sum()), ok=bool(float(diff.max()) < TOLERANCE))
    table = setup.runner.req_to_token_pool.req_to_token
    if unified:
        pt = backend.forward_metadata.kv_indices
        pt = pt.reshape(-1, pt.shape[-1])
        want_pt = torch.stack([table[r, : max(lens)] for r in reqs]).to(pt.dtype)
        agree = sum(int(torch.equal(pt[i, :n], want_pt[i, :n])) for i, n in enumerate(lens))
        record.update(page_table_rows_equal_req_to_token=f"{agree}/{len(reqs)}",
                      page_table_nonzero=int((pt[: len(reqs)] != 0).sum()))
    else:
        name = "cuda_graph_kv_indices"
        record.update(kv_indices_allocated=int(getattr(backend, name).numel()),
                      kv_indices_written=int(backend.forward_metadata.kv_indptr[len(reqs)]),
                      per_token_written=sum(lens))
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="width")
    parser.add_argument("--kinds", default="upstream,aiter-ext")
    parser.add_argument("--aiter-tree", help="folder holding aiter/ and AITER_ORIGIN (unified)")
    parser.add_argument("--pool", type=int, default=8)
    parser.add_argument("--device", default="cuda",
                        help="cpu: a dry run without graphs (TRITON_INTERPRET=1)")
    parser.add_argument("--no-graphs", action="store_true",
                        help="the same metadata calls, forward without a graph (memcheck)")
    parser.add_argument("--dtype", default="bfloat16",
                        help="model dtype (float16 for a CPU run: the interpreter's bf16 dot "
                        "is wrong)")
    args = parser.parse_args()
    mod = bpg.install_kernel_doubles()
    import sglang
    import triton

    parts = args.parts.split(",")
    origin = None
    if "unified" in parts:
        from testkit.doubles.aiter_triton import loaded, tree_at

        with loaded(tree_at(args.aiter_tree)) as kernel:
            mod.unified_attention = kernel.unified_attention
            origin = kernel.tree.origin
        if args.device == "cuda":
            tiles_of_at_least_16(kernel.module)
            origin += f"; 2D kernel, KV tile >= {MIN_TILE} (see tiles_of_at_least_16)"
    emit(part="versions", sglang=sglang.__version__, torch=torch.__version__,
         triton=triton.__version__, aiter=origin, date_utc=__import__("datetime").datetime.now(
             __import__("datetime").timezone.utc).isoformat(timespec="seconds"),
         gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else None)
    root = Path(tempfile.mkdtemp())
    for part in parts:
        page = 16 if part == "width" else 1
        model_dir = write_model_dir(root / f"tiny-llama-{part}")
        setup = configure(model_dir, SCENARIOS["plain"],
                          ("--page-size", str(page), "--dtype", args.dtype),
                          device=args.device, pool=args.pool)
        fill_paged_requests(setup.runner, args.pool, page, seed=0)
        ctx = int(setup.runner.model_config.context_len)
        n = min(args.pool, setup.max_bs)
        # near full context (width); mixed lengths over the whole context (unified)
        lens = ([ctx - 1 - i for i in range(n)] if part == "width"
                else [max(1, (ctx * (i + 1)) // (n + 1)) for i in range(n)])
        emit(part="config", which=part, page_size=page, pool=args.pool,
             capture_bs=setup.capture_bs, max_bs=setup.max_bs, context_len=ctx, lens=lens)
        with setup.scope:
            for kind in args.kinds.split(","):
                try:
                    emit(part=part, **replay(kind, setup, args.pool, part == "unified", lens,
                                             args.device, graphs=not args.no_graphs))
                except Exception as exc:  # evidence, not a crash
                    emit(part=part, kind=kind, error=f"{type(exc).__name__}: {exc}"[:500])


if __name__ == "__main__":
    main()
