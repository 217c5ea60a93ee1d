"""One self-test case for one backend, in the process that runs it (:mod:`.child`).

sglang is configured as a scheduler configures it (:mod:`.sglang_setup`: its parser, a config-only
model, its request and KV pools) with a request pool of :data:`POOL` requests, so that the graph
``max_bs`` two-batch overlap gives and DP attention's MLP-sync padding are both ``POOL + 1``. The
backend is built from its class (``AiterAttnBackend`` or ``AiterExtAttnBackend``) on that
configuration and runs sglang's own metadata code and the installed aiter kernels. Every real row
is compared with a torch reference computed from the KV pool (:mod:`.reference`).

Upstream's buffers are read before any kernel runs: a batch they cannot hold (a per-batch buffer
with fewer rows, a graph index buffer with fewer entries than the batch's tokens, aiter's
workspace layout) would make a kernel read or write past it, so that batch is held back unless
``unsafe`` is given (``--upstream-unsafe``).
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import traceback
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglang_aiter_plugin.selftest.cases import Case

if TYPE_CHECKING:
    import torch

    from sglang_aiter_plugin.selftest.sglang_setup import Setup

__all__ = ["POOL", "TOLERANCE", "Result", "run"]

POOL = 33
"""Requests in the pool P: odd, so that both two-batch overlap and DP attention at attention-TP 2
capture or pad a batch of 34."""
TOLERANCE = 2e-2
"""Largest absolute difference from the fp32 reference accepted for a 16-bit kernel."""
SEED = 0
STEPS, TOPK = 3, 1
"""The EAGLE draft wrapper's shape: 3 draft steps, top-1."""


@dataclass
class Result:
    """What one case did for one backend (the child prints it as JSON)."""

    outcome: str
    """``ok``, ``wrong``, ``raised``, ``skipped`` or ``held back``."""
    detail: str
    max_err: float | None = None
    sizes: list[int] = field(default_factory=list)
    """The batch sizes that ran."""
    held_back: list[int] = field(default_factory=list)
    """The batch sizes not run: upstream's buffers cannot hold them."""
    peak_gpu_mib: float | None = None

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _max_len(device: str) -> int:
    """The longest real request: long enough on a GPU that a page-16 graph batch holds more
    tokens than a per-page index buffer; short on the CPU, where Triton interprets."""
    return 600 if device != "cpu" else 40


def _dtype_flags(device: str) -> tuple[str, ...]:
    # Triton's CPU interpreter computes bf16 tl.dot wrongly (triton-lang/triton#11584)
    return ("--dtype", "bfloat16" if device != "cpu" else "float16")


class _Held(Exception):
    """A batch upstream's buffers cannot hold (never leaves this module)."""


def run(case: Case, kind: str, device: str, unsafe: bool) -> Result:
    """Run ``case`` on backend ``kind`` (``upstream`` or ``aiter-ext``) on ``device``."""
    with tempfile.TemporaryDirectory(prefix="sglang-aiter-selftest-") as tmp:
        try:
            return _run(case, kind, device, unsafe, Path(tmp))
        except Exception as exc:
            return _failure(exc)


def _failure(exc: BaseException) -> Result:
    first = (str(exc).strip().splitlines() or [""])[0]
    text = f"{type(exc).__name__}: {first}"[:300]
    if isinstance(exc, NotImplementedError) and _raised_by_a_kernel(exc):
        return Result("skipped", f"the installed aiter has no such kernel here ({text})")
    return Result("raised", text)


def _raised_by_a_kernel(exc: BaseException) -> bool:
    """Whether a function sglang's aiter backend imported from aiter (not sglang's own code) is in
    the traceback: the kernel said it is not implemented here."""
    module = sys.modules.get("sglang.srt.layers.attention.aiter_backend")
    if module is None:
        return False
    kernels = {getattr(fn, "__code__", None) for name, fn in vars(module).items()
               if callable(fn) and not str(getattr(fn, "__module__", "sglang")).startswith(
                   "sglang")}
    kernels.discard(None)
    return any(frame.f_code in kernels for frame, _ in traceback.walk_tb(exc.__traceback__))


def _run(case: Case, kind: str, device: str, unsafe: bool, tmp: Path) -> Result:
    from sglang_aiter_plugin.selftest.sglang_setup import SCENARIOS, configure, graphs_off

    page = ("--page-size", str(case.page))
    mla = case.path == "mla"
    model = _model_dir(tmp, mla)
    if case.form == "eager":
        setup = configure(model, SCENARIOS["dp-attention"], (*page, *graphs_off(),
                          *_dtype_flags(device)), device=device, pool=POOL)
    else:
        setup = configure(model, SCENARIOS["two-batch-overlap"], (*page, *_dtype_flags(device)),
                          device=device, pool=POOL)
    with setup.scope:
        from sglang_aiter_plugin.selftest.reference import fill_paged_requests

        fill_paged_requests(setup.runner, POOL, case.page, seed=SEED)
        if case.path == "draft":
            return _draft(setup, kind, device, unsafe)
        if case.form == "eager":
            return _eager(case, setup, kind, device)
        return _graphs(case, setup, kind, device, unsafe)


def _model_dir(tmp: Path, mla: bool) -> Path:
    from sglang_aiter_plugin.selftest.sglang_setup import write_model_dir

    return write_model_dir(tmp / "model", mla=mla, aiter_mla_dims=mla)


def _backend(kind: str, setup: Setup) -> Any:
    import importlib

    module, name = _CLASSES[kind][0]
    return getattr(importlib.import_module(module), name)(setup.runner)


_CLASSES = {  # kind -> (decode backend, multi-step draft wrapper), each (module, class)
    "upstream": (("sglang.srt.layers.attention.aiter_backend", "AiterAttnBackend"),
                 ("sglang.srt.layers.attention.aiter_backend", "AiterMultiStepDraftBackend")),
    "aiter-ext": (("sglang_aiter_plugin.backend.classes", "AiterExtAttnBackend"),
                  ("sglang_aiter_plugin.backend.classes", "AiterExtMultiStepDraftBackend")),
}


class _Shape:
    """What a row of ``q`` and of the output hold, and the reference for them."""

    def __init__(self, backend: Any, setup: Setup) -> None:
        from sglang_aiter_plugin.selftest.reference import make_layer

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

    def queries(self, rows: int, backend: Any, gen: torch.Generator, device: str) -> torch.Tensor:
        import torch

        q = torch.randn(rows, self.heads, self.q_dim, generator=gen)
        return q.to(backend.input_dtype).to(device)

    def error(self, setup: Setup, out: torch.Tensor, q: torch.Tensor, reqs: list[int],
              lens: list[int]) -> float:
        from sglang_aiter_plugin.selftest.reference import reference_mla_rows, reference_rows

        rows = len(reqs)
        got = out[:rows].reshape(rows, self.heads, self.out_dim).float()
        if self.mla:
            want = reference_mla_rows(setup.runner, q, reqs, lens, self.scale, self.out_dim)
        else:
            want = reference_rows(setup.runner, q, reqs, lens)
        diff = (got - want.to(got.device)).abs()
        return float("inf") if diff.isnan().any() else float(diff.max())


def _requests(bs: int, gen: torch.Generator, device: str) -> tuple[list[int], list[int]]:
    """At most P real requests in a batch of ``bs`` rows (sglang pads the rest), random lengths."""
    import torch

    n = min(bs, POOL)
    reqs = torch.randperm(POOL, generator=gen)[:n].tolist()
    lens = torch.randint(1, _max_len(device) + 1, (n,), generator=gen).tolist()
    return reqs, lens


def _graphs(case: Case, setup: Setup, kind: str, device: str, unsafe: bool) -> Result:
    import torch

    from sglang_aiter_plugin.selftest.decode_batch import DecodeBatch

    backend = _backend(kind, setup)
    backend.init_cuda_graph_state(setup.max_bs, setup.max_bs)
    shape = _Shape(backend, setup)
    gen = torch.Generator().manual_seed(SEED + 1)
    worst: tuple[float, int] = (0.0, 0)
    ran: list[int] = []
    held: dict[int, str] = {}
    for bs in setup.capture_bs:
        reqs, lens = _requests(bs, gen, device)
        q = shape.queries(len(reqs), backend, gen, device)
        short = _overruns(backend, case, bs, sum(lens) + (bs - len(reqs)))
        if short and kind == "upstream" and not unsafe:
            held[bs] = short
            continue
        batch = DecodeBatch(backend, bs, device, q_width=shape.heads * shape.q_dim)
        try:
            out = batch.run(shape.layer, reqs, lens, q, batch.capture(shape.layer))
            torch.cuda.synchronize(torch.device(device))
        except Exception as exc:
            failed = _failure(exc)
            failed.detail = f"at batch {bs}: {failed.detail}"
            failed.sizes = ran
            return failed
        ran.append(bs)
        err = shape.error(setup, out, q, reqs, lens)
        worst = max(worst, (err, bs))
    return _judged(worst, ran, held, setup)


def _judged(worst: tuple[float, int], ran: list[int], held: dict[int, str],
            setup: Setup) -> Result:
    err, at = worst
    sizes = f"batch {_span(ran)}" if ran else "no batch"
    if err > TOLERANCE:
        detail = f"{sizes}: max |diff| {err:.3g} at batch {at} (tolerance {TOLERANCE})"
        return Result("wrong", detail, round(err, 5), ran, sorted(held))
    pool = f"P = {POOL}, graph max_bs = {setup.max_bs}"
    if held:
        why = "; ".join(f"batch {bs}: {reason}" for bs, reason in sorted(held.items()))
        detail = (f"{sizes} right (max |diff| {err:.3g}); held back {why}; run them with "
                  "--upstream-unsafe")
        return Result("held back", detail, round(err, 5), ran, sorted(held))
    return Result("ok", f"{sizes} right, max |diff| {err:.3g} ({pool})", round(err, 5), ran)


def _span(sizes: list[int]) -> str:
    return f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]}..{sizes[-1]} ({len(sizes)} sizes)"


def _overruns(backend: Any, case: Case, bs: int, tokens: int) -> str:
    """What a decode batch of ``bs`` rows and ``tokens`` KV tokens would read or write past in
    ``backend``'s buffers ("" when nothing): the rows aiter's kernels address per batch row, and
    the graph index buffer sglang's kernel fills one entry per token."""
    import torch

    short = []

    def rows(name: str, need: int, what: str) -> None:
        buffer = getattr(backend, name, None)
        if isinstance(buffer, torch.Tensor) and buffer.numel() < need:
            short.append(f"{what} {name} ({buffer.numel()} entries, {need} needed)")

    rows("kv_indptr", bs + 1, "reads")
    if case.page > 1:
        rows("kv_last_page_len", bs, "reads")
    if case.path == "unified":
        rows("qo_indptr_unified_decode", bs + 1, "reads")
    if case.form == "graphs" and case.path != "unified":
        rows("cuda_graph_kv_indices", tokens, "writes")
    workspace = getattr(backend, "workspace_buffer", None)
    if case.path == "ragged" and isinstance(workspace, torch.Tensor):
        need = bs * _aiter_workspace_bytes_per_row(backend)
        if workspace.numel() * workspace.element_size() < need:
            short.append(f"writes workspace_buffer ({workspace.numel() * workspace.element_size()}"
                         f" bytes, {need} needed by aiter's layout)")
    return ", ".join(short)


def _aiter_workspace_bytes_per_row(backend: Any) -> int:
    """aiter's ``paged_attention_ragged`` writes, per batch row, ``exp_sums`` and ``max_logits``
    (fp32) and ``tmp_out`` (query dtype, head size wide), each per head and partition."""
    import torch

    heads, parts = int(backend.num_head), int(backend.max_num_partitions)
    head = max(int(backend.head_dim), int(getattr(backend, "v_head_dim", 0) or 0))
    q_bytes = torch.empty((), dtype=backend.input_dtype).element_size()
    return heads * parts * (2 * 4 + head * q_bytes)


def _eager(case: Case, setup: Setup, kind: str, device: str) -> Result:
    import torch

    from sglang_aiter_plugin.selftest.mlp_sync import mlp_synced_batch

    backend = _backend(kind, setup)
    shape = _Shape(backend, setup)
    gen = torch.Generator().manual_seed(SEED + 2)
    reqs = list(range(POOL))
    lens = torch.randint(1, _max_len(device) + 1, (POOL,), generator=gen).tolist()
    fb = mlp_synced_batch(setup, backend, "decode", POOL, [POOL], device, lens=lens)
    bs = int(fb.batch_size)
    q = shape.queries(bs, backend, gen, device)
    short = _overruns(backend, case, bs, int(fb.seq_lens.sum()))
    if short and kind == "upstream" and "writes" in short:
        return Result("held back", f"batch {bs}: {short}; run it with --upstream-unsafe",
                      held_back=[bs])
    try:
        backend.init_forward_metadata(fb)
        out = backend.forward_decode(q.reshape(bs, -1), None, None, shape.layer, fb,
                                     save_kv_cache=False)
        if device != "cpu":
            torch.cuda.synchronize()
    except Exception as exc:
        failed = _failure(exc)
        failed.detail = f"at batch {bs} ({POOL} requests padded by MLP sync): {failed.detail}"
        return failed
    err = shape.error(setup, out, q[:POOL], reqs, lens)
    if err > TOLERANCE:
        return Result("wrong", f"batch {bs}: max |diff| {err:.3g} (tolerance {TOLERANCE})",
                      round(err, 5), [bs])
    return Result("ok", f"batch {bs} ({POOL} requests padded by MLP sync) right, max |diff| "
                  f"{err:.3g}", round(err, 5), [bs])


def _draft(setup: Setup, kind: str, device: str, unsafe: bool) -> Result:
    """The draft wrapper's per-step ``kv_indptr`` rows after its graph metadata, at every captured
    size: each row the cumulative lengths of its step, element 0 still 0 after a later batch."""
    import importlib

    import torch

    from sglang_aiter_plugin.selftest.decode_batch import Batch, draft_metadata

    module, name = _CLASSES[kind][1]
    draft = getattr(importlib.import_module(module), name)(setup.runner, TOPK, STEPS)
    draft.init_cuda_graph_state(setup.max_bs, setup.max_bs)
    gen = torch.Generator().manual_seed(SEED + 3)
    ran: list[int] = []
    held: dict[int, str] = {}
    wrong: list[str] = []
    for bs in setup.capture_bs:
        width = int(draft.kv_indptr.shape[-1])
        if width < bs * TOPK + 1 and kind == "upstream" and not unsafe:
            held[bs] = f"writes past kv_indptr's last row ({width} entries, {bs * TOPK + 1} needed)"
            continue
        reqs, lens = _requests(bs, gen, device)
        pad = bs - len(reqs)
        seq = torch.tensor(lens + [1] * pad, device=device)
        fb = Batch(batch_size=bs, seq_lens=seq, seq_lens_cpu=seq.cpu(),
                   seq_lens_sum=int(seq.sum()), positions=seq.clone(), forward_mode=None,
                   req_pool_indices=torch.tensor(reqs + [0] * pad, device=device),
                   spec_info=Batch(), kv_loc_plan=None,
                   input_ids=torch.zeros(bs, dtype=torch.int64, device=device),
                   req_to_token_pool=setup.runner.req_to_token_pool)
        try:
            for _ in range(2):  # a second batch shows what the first left in element 0
                draft_metadata(draft, fb)
            if device != "cpu":
                torch.cuda.synchronize()
        except Exception as exc:
            failed = _failure(exc)
            failed.detail = f"at batch {bs}: {failed.detail}"
            return failed
        ran.append(bs)
        for step in range(STEPS - 1):
            want = [0, *torch.cumsum(seq.cpu() + step + 1, 0).tolist()]
            got = draft.kv_indptr[step, : bs + 1].tolist()
            if got != want:
                first = next(i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b)
                wrong.append(f"batch {bs} step {step}: kv_indptr[{first}] = {got[first]}, "
                             f"{want[first]} expected")
    if wrong:
        return Result("wrong", "; ".join(wrong[:3]) + (f" (+{len(wrong) - 3} more)"
                      if len(wrong) > 3 else ""), None, ran, sorted(held))
    if held:
        why = "; ".join(f"batch {bs}: {reason}" for bs, reason in sorted(held.items()))
        return Result("held back", f"batch {_span(ran)} right; held back {why}; run them with "
                      "--upstream-unsafe", None, ran, sorted(held))
    return Result("ok", f"batch {_span(ran)}: every step's kv_indptr right ({STEPS} steps, top-"
                  f"{TOPK})", None, ran)


@contextlib.contextmanager
def gpu_memory_bound(device: str, mib: int) -> Iterator[None]:
    """Cap this process's GPU allocations at ``mib`` MiB (an allocation past it raises an
    out-of-memory error here instead of taking memory from anything else on the GPU)."""
    if device == "cpu":
        yield
        return
    import torch

    index = torch.device(device).index or 0
    total = torch.cuda.get_device_properties(index).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, mib * 2**20 / total), index)
    yield


def peak_gpu_mib(device: str) -> float | None:
    if device == "cpu":
        return None
    import torch

    return round(torch.cuda.max_memory_allocated(torch.device(device)) / 2**20, 1)


def environment_for(case: Case) -> dict[str, str]:
    """The settings sglang reads for ``case`` before its backend is built."""
    return {"SGLANG_USE_AITER_UNIFIED_ATTN": "1" if case.path == "unified" else "0"}

