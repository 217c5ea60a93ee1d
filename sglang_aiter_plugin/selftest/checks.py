"""One self-test case for one backend, in the process that runs it (:mod:`.child`).

sglang is configured as a scheduler configures it (:mod:`.sglang_setup`: its parser, a config-only
model, its request and KV pools) with a request pool of :data:`POOL` requests, so that the graph
``max_bs`` two-batch overlap gives and DP attention's MLP-sync padding are both ``POOL + 1``. The
backend is built from its class (``AiterAttnBackend`` or ``AiterExtAttnBackend``) on that
configuration and runs sglang's own metadata code and the installed aiter kernels. Every real row
is compared with a torch reference computed from the KV pool (:mod:`.reference`). A case of the
operator's deployment (:mod:`.deployment`) is configured by the operator's own sglang arguments
and model config instead, with its own pool.

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

__all__ = ["POOL", "TOLERANCE", "Result", "holds", "judge", "run"]

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
    from sglang_aiter_plugin.selftest.reference import fill_paged_requests

    setup, pool, others = _configured(case, device, tmp)
    with setup.scope:
        fill_paged_requests(setup.runner, pool, int(setup.runner.page_size), seed=SEED)
        if case.path == "draft":
            return _draft(case, setup, kind, device, unsafe)
        if case.form == "eager":
            return _eager(case, setup, kind, device, unsafe, pool, others)
        return _graphs(case, setup, kind, device, unsafe, pool)


def _configured(case: Case, device: str, tmp: Path) -> tuple[Setup, int, list[int]]:
    """sglang configured for ``case``: the self-test's own model and scenario, or the operator's
    deployment (its model's config.json, its arguments, its pool); the request pool; the token
    counts the other attention-DP ranks report for the eager batch."""
    from sglang_aiter_plugin.selftest.sglang_setup import (
        SCENARIOS,
        Scenario,
        configure,
        graphs_off,
        write_model_dir,
    )

    off = graphs_off() if case.form == "eager" else ()
    d = case.deployment
    if d is not None:
        scenario = Scenario("deployment", d.args, d.args, d.attn_tp, d.attn_dp)
        dtype = _dtype_flags(device) if device == "cpu" else ()
        setup = configure(Path(d.model), scenario, (*off, *dtype), device=device, pool=d.pool,
                          capture=None)
        return setup, d.pool, [d.pool] * (d.attn_dp - 1)
    page = ("--page-size", str(case.page))
    mla = case.path == "mla"
    model = write_model_dir(tmp / "model", mla=mla, aiter_mla_dims=mla)
    scenario = SCENARIOS["dp-attention" if case.form == "eager" else "two-batch-overlap"]
    setup = configure(model, scenario, (*page, *off, *_dtype_flags(device)), device=device,
                      pool=POOL)
    return setup, POOL, [POOL] * (scenario.dp - 1)


def _graphs(case: Case, setup: Setup, kind: str, device: str, unsafe: bool, pool: int) -> Result:
    from sglang_aiter_plugin.selftest.decode import build_backend, graph_sizes

    backend = build_backend(kind, setup)
    draft = _draft_tokens(case, setup)
    sizes = graph_sizes(case, setup, backend, device, SEED + 1, _max_len(device),
                        hold=holds(case, kind, unsafe), draft=draft)
    return judge(kind, list(sizes), f"P = {pool}, graph max_bs = {setup.max_bs}"
                 + _verify(case, draft) + _shape(case, setup, backend), unsafe)


def _eager(case: Case, setup: Setup, kind: str, device: str, unsafe: bool, pool: int,
           others: list[int]) -> Result:
    from sglang_aiter_plugin.backend.capacity import requires_mlp_sync
    from sglang_aiter_plugin.selftest.decode import build_backend, eager_batch

    backend = build_backend(kind, setup)
    padded = " padded by MLP sync" if requires_mlp_sync(setup.server_args) else ""
    draft = _draft_tokens(case, setup)
    batch = eager_batch(case, setup, backend, device, SEED + 2, _max_len(device), rows=pool,
                        others=[n * draft for n in others], hold=holds(case, kind, unsafe),
                        draft=draft)
    return judge(kind, [batch], f"{pool} requests{padded}" + _verify(case, draft)
                 + _shape(case, setup, backend), unsafe)


def _draft_tokens(case: Case, setup: Setup) -> int:
    """The tokens a request brings to a target-verify or draft-extend batch
    (``--speculative-num-draft-tokens``); 1 for a decode batch."""
    if case.mode == "decode":
        return 1
    return int(getattr(setup.server_args, "speculative_num_draft_tokens", None) or 1)


def _verify(case: Case, draft: int) -> str:
    what = {"verify": "target verify", "draft-extend": "draft extend"}.get(case.mode)
    return f", {what} of {draft} draft tokens a request" if what else ""


def _shape(case: Case, setup: Setup, backend: Any) -> str:
    """For a deployment's case: the per-rank heads the backend was built with, the KV type."""
    if case.deployment is None:
        return ""
    kv = str(setup.runner.kv_cache_dtype).removeprefix("torch.")
    if getattr(backend, "use_mla", False):
        return f"; {int(backend.num_head)} query heads a rank over one latent KV head, KV {kv}"
    return f"; {int(backend.num_head)} query / {int(backend.num_kv_head)} KV heads a rank, KV {kv}"


def holds(case: Case, kind: str, unsafe: bool) -> Callable[[str], bool]:
    """The hold-back rule of ``case``'s form: which predicted overruns (:func:`.decode.overruns`)
    keep a batch from running. Only upstream's batches are held back, and not with ``unsafe``
    (``--upstream-unsafe``); ``aiter-ext``'s run, and an overrun fails them (:func:`judge`).
    Eager batches: sglang's eager metadata fills the per-batch buffers with torch slices, which
    raise on a short buffer before any kernel runs, so only a kernel's own writes (aiter's
    workspace) are held back."""
    writes_only = case.form == "eager"
    return lambda short: (kind == "upstream" and not unsafe
                          and (not writes_only or "writes" in short))


def judge(kind: str, batches: list[SizeOutcome], what: str, unsafe: bool) -> Result:
    """The one verdict of a case from its batches, for every form.

    ``aiter-ext``: ``wrong`` wherever a batch would read or write past its buffers (whether or not
    the comparison noticed). Then, for either backend: the first batch that raised decides
    (``raised``, or ``skipped`` where the kernel is not implemented here); ``wrong`` where a batch
    is off the reference (the worst one named with its difference) or its metadata is wrong;
    ``held back`` where a batch did not run; else ``ok``. The detail then says what the batches
    nothing held back would read or write past: a batch that ran to its end ran past its buffers;
    one that raised had them short, whether or not a kernel got past them first."""
    ran = [b.bs for b in batches if not b.held and b.error is None]
    held = sorted(b.bs for b in batches if b.held)
    measured = [b for b in batches if b.max_err is not None]
    worst = max(measured, key=lambda b: b.max_err or 0.0, default=None)
    err = worst.max_err if worst is not None else None
    rounded = round(err, 5) if err is not None else None
    span = f"batch {_span(ran)}" if ran else "no batch"
    failed = next((b.error for b in batches if b.error is not None), None)
    failed_at = next((b.bs for b in batches if b.error is not None), None)
    wrong = [f"batch {b.bs} {b.wrong}" for b in batches if b.wrong]
    past = "; ".join(f"batch {b.bs} {b.past}" for b in batches if b.past)
    if kind == "aiter-ext" and past:
        outcome = "wrong"
        detail = f"its own buffers are short: {past}"
        if failed is not None:
            detail += f"; at batch {failed_at}: {_failure(failed).detail}"
        elif err is not None:
            detail += f"; {span}: max |diff| {err:.3g} at batch {worst.bs if worst else '?'}"
        return Result(outcome, detail, rounded, ran, held)
    if failed is not None:
        result = _failure(failed)
        outcome, detail = result.outcome, f"at batch {failed_at}: {result.detail}"
    elif worst is not None and err is not None and err > TOLERANCE:
        outcome = "wrong"
        detail = f"{span}: max |diff| {err:.3g} at batch {worst.bs} (tolerance {TOLERANCE})"
    elif wrong:
        outcome = "wrong"
        detail = "; ".join(wrong[:3]) + (f" (+{len(wrong) - 3} more)" if len(wrong) > 3 else "")
    else:
        right = f"{span} right" + (f", max |diff| {err:.3g}" if err is not None else "")
        if held:
            why = "; ".join(f"batch {b.bs} {b.held}" for b in batches if b.held)
            outcome, detail = "held back", f"{right}; held back: {why}; run with --upstream-unsafe"
        else:
            outcome, detail = "ok", f"{right} ({what})"
    ran_past = "; ".join(f"batch {b.bs} {b.past}" for b in batches if b.past and b.error is None)
    short = "; ".join(f"batch {b.bs} {b.past}" for b in batches if b.past and b.error is not None)
    if ran_past:
        detail += f"; ran past its buffers{' (--upstream-unsafe)' if unsafe else ''}: {ran_past}"
    if short:
        detail += f"; its buffers were short: {short}"
    return Result(outcome, detail, rounded, ran, held)


def _span(sizes: list[int]) -> str:
    return f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]}..{sizes[-1]} ({len(sizes)} sizes)"


def _draft(case: Case, setup: Setup, kind: str, device: str, unsafe: bool) -> Result:
    """The draft wrapper's per-step ``kv_indptr`` rows after its graph metadata, at every captured
    size: each row the cumulative lengths of its step, element 0 still 0 after a later batch."""
    from sglang_aiter_plugin.selftest.decode import build_backend, draft_sizes

    topk, steps = (TOPK, STEPS) if case.deployment is None else (case.deployment.draft
                                                                  or (TOPK, STEPS))
    draft = build_backend(kind, setup, draft=(topk, steps))
    batches = list(draft_sizes(case, setup, draft, device, SEED + 3, _max_len(device),
                               hold=holds(case, kind, unsafe)))
    return judge(kind, batches, f"each step's kv_indptr, {steps} steps, top-{topk}", unsafe)


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
    torch.cuda.reset_peak_memory_stats(index)  # each case's own peak (peak_gpu_mib)
    yield


def peak_gpu_mib(device: str) -> float | None:
    if device == "cpu":
        return None
    import torch

    return round(torch.cuda.max_memory_allocated(torch.device(device)) / 2**20, 1)
