"""GPU evidence: eager decode and extend at the size sglang's MLP-sync padding makes, graphs off.

sglang's own parser builds a DP-attention configuration (``--tp 4`` with two attention-DP ranks,
attention-TP 2) with decode CUDA graphs disabled and a request pool P = 33. Each batch is made by
sglang's real ``ForwardBatch.prepare_mlp_sync_batch`` (``sglang_aiter_plugin/selftest/mlp_sync.py``)
and then goes through the backend's real ``init_forward_metadata`` and
``forward_decode``/``forward_extend``, as sglang's eager forward runs it:

* ``decode``: a full rank of P real requests; the padding makes it 34 rows;
* ``idle``: an idle rank beside a full one; the padding makes it 34 padding rows;
* ``extend``: a full rank of P requests extending 3 tokens each (rows unpadded, tokens padded).

aiter's kernels are replaced by ``testkit/doubles/aiter_gpu_kernels.py`` (aiter's per-row memory
contract), so ``compute-sanitizer --tool memcheck`` with ``PYTORCH_NO_CUDA_MEMORY_CACHING=1`` sees
every read and write past a per-batch buffer. Real rows are compared with a torch reference from
the request table.
Prints one ``RESULT`` JSON line per result; exits 0 whatever the results (they are evidence).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from gpu import buffer_pool_graphs as bpg  # makes aiter unimportable first
from sglang_aiter_plugin.selftest.cases import Case
from sglang_aiter_plugin.selftest.checks import TOLERANCE
from sglang_aiter_plugin.selftest.decode import eager_batch
from sglang_aiter_plugin.selftest.reference import fill_paged_requests, reference_rows
from sglang_aiter_plugin.selftest.sglang_setup import graphs_off
from testkit.batch_paths import SCENARIOS
from testkit.batches import synced_batch
from testkit.doubles import aiter_gpu_kernels as ref
from testkit.sglang_setup import configure, write_model_dir

EXTEND = 3


def _backend(kind: str, setup: Any, path: str) -> Any:
    os.environ["SGLANG_USE_AITER_UNIFIED_ATTN"] = "1" if path == "unified" else "0"
    if kind == "aiter-ext":
        from sglang_aiter_plugin.backend.classes import AiterExtAttnBackend as cls
    else:
        from sglang.srt.layers.attention.aiter_backend import AiterAttnBackend as cls
    return cls(setup.runner)  # no init_cuda_graph_state: graphs are off


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def run_decode(kind: str, path: str, setup: Any, pool: int, mode: str, device: str) -> None:
    """The self-test's eager batch (``eager_batch``): a full rank (``decode``) or an idle one
    beside a full one (``idle``), nothing held back."""
    backend = _backend(kind, setup, path)
    case = Case(f"{path}-page1-eager", path, 1, "eager")
    rows = pool if mode == "decode" else 0
    batch = eager_batch(case, setup, backend, device, seed=3, max_len=bpg.MAX_LEN, rows=rows,
                        others=[pool], hold=lambda _: False)
    record: dict[str, Any] = dict(part=mode, kind=kind, path=path, pool=pool, bs=batch.bs,
                                  capacity=int(backend.kv_indptr.shape[-1]) - 1)
    if batch.error is not None:
        bpg.emit(**record, error=f"{type(batch.error).__name__}: {batch.error}"[:300])
        return
    if batch.max_err is not None:
        record.update(real_rows=rows, max_abs_err=round(batch.max_err, 5),
                      rows_ok=bool(batch.max_err < TOLERANCE))
    bpg.emit(**record)


def run_extend(kind: str, path: str, setup: Any, pool: int, device: str) -> None:
    backend = _backend(kind, setup, path)
    layer = bpg.make_layer(backend)
    gen = torch.Generator().manual_seed(4)
    lens = torch.randint(EXTEND, 64, (pool,), generator=gen).tolist()
    fb = synced_batch(setup, backend, "extend", pool, [3 * pool], device, lens=lens)
    tokens = int(fb.input_ids.shape[0])  # padded by sglang
    q = torch.randn(tokens, backend.num_head, backend.head_dim, generator=gen).to(
        backend.input_dtype
    ).to(device)
    record: dict[str, Any] = dict(part="extend", kind=kind, path=path, pool=pool,
                                  bs=int(fb.batch_size), tokens=tokens,
                                  capacity=int(backend.kv_indptr.shape[-1]) - 1)
    ref.CALLS.clear()
    try:
        backend.init_forward_metadata(fb)
        out = backend.forward_extend(q.reshape(tokens, -1), None, None, layer, fb,
                                     save_kv_cache=False)
        _sync(device)
    except Exception as exc:
        bpg.emit(**record, error=f"{type(exc).__name__}: {exc}"[:300])
        return
    call = ref.CALLS[-1] if ref.CALLS else {}
    want_q = list(range(0, EXTEND * pool + 1, EXTEND))
    got = out.reshape(tokens, backend.num_head, backend.head_dim).float()
    right, start = 0, 0
    for r, n in enumerate(lens):
        for i in range(EXTEND):
            want = reference_rows(setup.runner, q[start + i : start + i + 1], [r],
                                        [n - EXTEND + i + 1])
            right += int((got[start + i] - want[0].to(got.device)).abs().max().item() < 2e-2)
        start += EXTEND
    # The prefill kernel records what it was handed (the unified path calls another kernel).
    handed = call.get("cu_seqlens_q") == want_q if call else None
    bpg.emit(**record, cu_seqlens_q_ok=handed, rows_right=f"{right}/{EXTEND * pool}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--kinds", default="aiter-ext,upstream")
    parser.add_argument("--paths", default="ragged,unified")
    parser.add_argument("--parts", default="decode,idle,extend")
    parser.add_argument("--pool", type=int, default=33)
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    mod = bpg.install_kernel_doubles()
    import sglang

    bpg.emit(part="versions", sglang=sglang.__version__, torch=torch.__version__,
             triton=__import__("triton").__version__, backend_module=mod.__file__,
             gpu=torch.cuda.get_device_name() if torch.cuda.is_available() else None)
    model_dir = write_model_dir(Path(tempfile.mkdtemp()) / "tiny-llama")
    flags = graphs_off()  # page size 1, as sglang defaults
    setup = configure(model_dir, SCENARIOS["dp-attention"], flags, device=args.device,
                      pool=args.pool)
    fill_paged_requests(setup.runner, args.pool, bpg.PAGE, seed=0)
    bpg.emit(part="config", scenario="dp-attention (attention-TP 2), graphs off", pool=args.pool,
             flags=list(flags))
    with setup.scope:
        for kind in args.kinds.split(","):
            for path in args.paths.split(","):
                for part in args.parts.split(","):
                    try:
                        if part == "extend":
                            run_extend(kind, path, setup, args.pool, args.device)
                        else:
                            run_decode(kind, path, setup, args.pool, part, args.device)
                    except Exception as exc:
                        bpg.emit(part=part, kind=kind, path=path,
                                 error=f"{type(exc).__name__}: {exc}"[:500])


if __name__ == "__main__":
    main()
