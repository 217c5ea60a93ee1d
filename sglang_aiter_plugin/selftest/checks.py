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
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglang_aiter_plugin.selftest.cases import Case

if TYPE_CHECKING:
    from sglang_aiter_plugin.selftest.decode import SizeOutcome
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


def run(case: Case, kind: str, device: str, unsafe: bool) -> Result:
    """Run ``case`` on backend ``kind`` (``upstream`` or ``aiter-ext``) on ``device``."""
    with tempfile.TemporaryDirectory(prefix="sglang-aiter-selftest-") as tmp:
        try:
            return _run(case, kind, device, unsafe, Path(tmp))
        except Exception as exc:
            return _failure(exc)


def _failure(exc: BaseException) -> Result:
    from sglang_aiter_plugin._errors import shorten

    first = (str(exc).strip().splitlines() or [""])[0]
    text = shorten(f"{type(exc).__name__}: {first}", 300, quoted=False)
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
    from sglang_aiter_plugin.selftest.sglang_setup import (
        SCENARIOS,
        configure,
        graphs_off,
        write_model_dir,
    )

    page = ("--page-size", str(case.page))
    mla = case.path == "mla"
    model = write_model_dir(tmp / "model", mla=mla, aiter_mla_dims=mla)
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
            return _eager(case, setup, kind, device, unsafe)
        return _graphs(case, setup, kind, device, unsafe)


def _graphs(case: Case, setup: Setup, kind: str, device: str, unsafe: bool) -> Result:
    from sglang_aiter_plugin.selftest.decode import build_backend, graph_sizes

    sizes = graph_sizes(case, setup, build_backend(kind, setup), device, SEED + 1,
                        _max_len(device), hold=_holds(kind, unsafe))
    return _judged(list(sizes), f"P = {POOL}, graph max_bs = {setup.max_bs}", unsafe)


def _eager(case: Case, setup: Setup, kind: str, device: str, unsafe: bool) -> Result:
    from sglang_aiter_plugin.selftest.decode import build_backend, eager_batch

    batch = eager_batch(case, setup, build_backend(kind, setup), device, SEED + 2,
                        _max_len(device), rows=POOL, others=[POOL],
                        hold=_holds(kind, unsafe, writes_only=True))
    return _judged([batch], f"{POOL} requests padded by MLP sync", unsafe)


def _holds(kind: str, unsafe: bool, *, writes_only: bool = False) -> Callable[[str], bool]:
    """Which predicted overruns keep a batch from running: upstream's, unless ``unsafe``.
    ``writes_only`` (eager batches): sglang's eager metadata fills the per-batch buffers with
    torch slices, which raise on a short buffer before any kernel runs, so only a kernel's own
    writes (aiter's workspace) are held back."""
    return lambda short: (kind == "upstream" and not unsafe
                          and (not writes_only or "writes" in short))


def _judged(sizes: list[SizeOutcome], what: str, unsafe: bool) -> Result:
    """One result for a case's batches: ``raised`` at the first that raised, ``wrong`` where a
    row is off the reference, ``held back`` where any batch did not run, else ``ok``; then what
    the batches nothing held back would read or write past (the comparison cannot see it): a batch
    that ran to its end ran past its buffers; one that raised had them short, whether or not a
    kernel got past them first."""
    result = _verdict(sizes, what)
    ran = "; ".join(f"batch {s.bs} {s.past}" for s in sizes if s.past and s.error is None)
    raised = "; ".join(f"batch {s.bs} {s.past}" for s in sizes if s.past and s.error is not None)
    if ran:
        result.detail += f"; ran past its buffers{' (--upstream-unsafe)' if unsafe else ''}: {ran}"
    if raised:
        result.detail += f"; its buffers were short: {raised}"
    return result


def _verdict(sizes: list[SizeOutcome], what: str) -> Result:
    ran = [s.bs for s in sizes if not s.held and s.error is None]
    held = {s.bs: s.held for s in sizes if s.held}
    errors = [s for s in sizes if s.max_err is not None]
    worst = max(errors, key=lambda s: s.max_err or 0.0, default=None)
    err = worst.max_err if worst is not None and worst.max_err is not None else None
    rounded = round(err, 5) if err is not None else None
    for s in sizes:
        if s.error is not None:
            failed = _failure(s.error)
            return Result(failed.outcome, f"at batch {s.bs}: {failed.detail}", rounded, ran,
                          sorted(held))
    span = f"batch {_span(ran)}" if ran else "no batch"
    if worst is not None and err is not None and err > TOLERANCE:
        return Result("wrong", f"{span}: max |diff| {err:.3g} at batch {worst.bs} (tolerance "
                      f"{TOLERANCE})", rounded, ran, sorted(held))
    right = f"{span} right" + (f", max |diff| {err:.3g}" if err is not None else "")
    if held:
        why = "; ".join(f"batch {bs} {reason}" for bs, reason in sorted(held.items()))
        return Result("held back", f"{right}; held back: {why}; run with --upstream-unsafe",
                      rounded, ran, sorted(held))
    return Result("ok", f"{right} ({what})", rounded, ran)


def _span(sizes: list[int]) -> str:
    return f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]}..{sizes[-1]} ({len(sizes)} sizes)"


def _draft(setup: Setup, kind: str, device: str, unsafe: bool) -> Result:
    """The draft wrapper's per-step ``kv_indptr`` rows after its graph metadata, at every captured
    size: each row the cumulative lengths of its step, element 0 still 0 after a later batch."""
    import torch

    from sglang_aiter_plugin.selftest.decode import build_backend, requests_for
    from sglang_aiter_plugin.selftest.decode_batch import Batch, draft_metadata

    draft = build_backend(kind, setup, draft=(TOPK, STEPS))
    draft.init_cuda_graph_state(setup.max_bs, setup.max_bs)
    gen = torch.Generator().manual_seed(SEED + 3)
    ran: list[int] = []
    held: dict[int, str] = {}
    wrong: list[str] = []
    past: list[str] = []
    for bs in setup.capture_bs:
        width = int(draft.kv_indptr.shape[-1])
        if width < bs * TOPK + 1:
            short = f"writes past kv_indptr's last row ({width} entries, {bs * TOPK + 1} needed)"
            if kind == "upstream" and not unsafe:
                held[bs] = short
                continue
            past.append(f"batch {bs} {short}")
        reqs, lens = requests_for(bs, POOL, gen, _max_len(device))
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
            if len(got) < len(want):
                wrong.append(f"batch {bs} step {step}: kv_indptr's row holds {len(got)} entries, "
                             f"{len(want)} needed")
            elif got != want:
                first = next(i for i, (a, b) in enumerate(zip(got, want, strict=True)) if a != b)
                wrong.append(f"batch {bs} step {step}: kv_indptr[{first}] = {got[first]}, "
                             f"{want[first]} expected")
    ran_past = f"; ran past its buffers (--upstream-unsafe): {'; '.join(past)}" if past else ""
    if wrong:
        return Result("wrong", "; ".join(wrong[:3]) + (f" (+{len(wrong) - 3} more)"
                      if len(wrong) > 3 else "") + ran_past, None, ran, sorted(held))
    if held:
        why = "; ".join(f"batch {bs}: {reason}" for bs, reason in sorted(held.items()))
        return Result("held back", f"batch {_span(ran)} right; held back {why}; run them with "
                      "--upstream-unsafe", None, ran, sorted(held))
    return Result("ok", f"batch {_span(ran)}: every step's kv_indptr right ({STEPS} steps, top-"
                  f"{TOPK}){ran_past}", None, ran)


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

