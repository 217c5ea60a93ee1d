"""``AiterExtAttnBackend`` and ``AiterExtMultiStepDraftBackend``: sglang's AITER backends with
their per-batch buffers in one :class:`~.pool.BufferPool` each, sized at construction for the
largest batch on any path (:mod:`.capacity`); graph set-up (:class:`PooledGraphState`) makes rows
and widths right before the first capture. Everything else is upstream's own, except where its
graph metadata leaves a buffer wrong (``backend.DEFECTS``) or the bounds check is asked for.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import torch
from sglang.srt.layers.attention.aiter_backend import AiterAttnBackend, AiterMultiStepDraftBackend

from sglang_aiter_plugin._errors import AiterExtError
from sglang_aiter_plugin._rebind import rebound
from sglang_aiter_plugin._sglang import installed_sglang_version
from sglang_aiter_plugin._switches import bounds_check_requested
from sglang_aiter_plugin.backend.capacity import batch_capacity
from sglang_aiter_plugin.backend.pool import BufferPool, BufferSpec, Fill

__all__ = ["FROZEN_REASON", "METADATA_METHODS", "NOT_PER_BATCH", "PREFILL_UPDATERS",
           "AiterExtAttnBackend", "AiterExtMultiStepDraftBackend", "BatchTooLargeError",
           "PooledGraphState", "UnknownBatchBufferError", "UnknownGraphLayoutError", "discover",
           "install_bounds_check", "is_checked", "workspace_bytes_per_row"]

FROZEN_REASON = "CUDA graphs were captured against the current buffers"

#: Backend attributes holding prefill index updaters, which keep pool buffers under the same
#: names (``kv_indptr``, ``qo_indptr``, ``kv_last_page_len``).
PREFILL_UPDATERS = ("indices_updater_prefill", "mla_indices_updater_prefill")

#: Entry points that write a captured batch's metadata (0.5.11-0.5.17: capture/replay;
#: 0.5.18+: ``out_graph``, for capture and replay).
METADATA_METHODS = (
    "init_forward_metadata_capture_cuda_graph",
    "init_forward_metadata_replay_cuda_graph",
    "init_forward_metadata_out_graph",
)

#: Per-batch buffers upstream allocates at P (by release and configuration):
#: name -> (dtype as upstream allocates it, fill, entries beyond the rows).
_CATALOGUE: dict[str, tuple[torch.dtype, Fill, int]] = {
    "kv_indptr": (torch.int32, Fill.ZEROS, 1),
    "qo_indptr": (torch.int32, Fill.ZEROS, 1),
    "mask_indptr": (torch.int64, Fill.ZEROS, 1),
    "qo_indptr_": (torch.int32, Fill.ZEROS, 1),
    "kv_last_page_len": (torch.int32, Fill.ONES, 0),
    "qo_indptr_unified_decode": (torch.int32, Fill.ARANGE, 1),
}
_WORKSPACE = "workspace_buffer"  # ragged paged decode only; sized per row in bytes

#: Tensors whose first dimension may equal P or P + 1 without being per-batch buffers.
NOT_PER_BATCH = frozenset({"req_to_token", "q_scale", "k_scale", "v_scale"})

_CHECKED = "__aiter_ext_bounds_checked__"
_FILLS_PAGE_TABLE = "__aiter_ext_fills_page_table__"


class UnknownBatchBufferError(AiterExtError, RuntimeError):
    """The installed backend holds a batch-sized buffer the pool does not know how to grow."""


class BatchTooLargeError(AiterExtError, ValueError):
    """A CUDA-graph metadata call asked for more than the buffers captured for it hold."""


class UnknownGraphLayoutError(AiterExtError, RuntimeError):
    """Upstream's ``init_cuda_graph_state`` sized a graph buffer in a layout not known here."""


def workspace_bytes_per_row(backend: Any) -> int:
    """Bytes of ``workspace_buffer`` per batch row: the larger of aiter's layout for
    ``paged_attention_ragged`` and upstream's formula, so never less than upstream."""
    heads = int(backend.num_head)
    partitions = int(backend.max_num_partitions)
    head_size = max(int(backend.head_dim), int(getattr(backend, "v_head_dim", 0) or 0))
    q_bytes = torch.empty((), dtype=backend.input_dtype).element_size()
    aiter_layout = heads * partitions * (2 * 4 + head_size * q_bytes)
    upstream_formula = heads * partitions * int(backend.head_dim) * 4 + 2 * heads * partitions * 4
    return max(aiter_layout, upstream_formula)


def discover(
    backend: Any, capacity: int, *, skip: frozenset[str] = frozenset()
) -> list[BufferSpec]:
    """Specs of the per-batch buffers ``backend`` holds at ``capacity`` rows (``skip``: borrowed
    ones); an unknown batch-sized tensor raises :class:`UnknownBatchBufferError`."""
    specs: list[BufferSpec] = []
    unknown: list[str] = []
    for name, value in vars(backend).items():
        if not isinstance(value, torch.Tensor) or name in skip:
            continue
        if name == _WORKSPACE:
            specs.append(BufferSpec(name, torch.uint8, Fill.UNINITIALISED,
                                    workspace_bytes_per_row(backend)))
        elif name in _CATALOGUE:
            dtype, fill, extra = _CATALOGUE[name]
            specs.append(BufferSpec(name, dtype, fill, extra=extra))
        elif name not in NOT_PER_BATCH and value.dim() >= 1 and value.shape[0] in (
            capacity, capacity + 1
        ):
            unknown.append(f"{name} {tuple(value.shape)} {value.dtype}")
    if unknown:
        raise UnknownBatchBufferError(
            f"{type(backend).__name__} holds buffers sized by the request pool ({capacity}) that "
            f"sglang-aiter-plugin does not know how to grow: {', '.join(unknown)}. A CUDA graph "
            "captured above the pool size would read past them. Upgrade sglang-aiter-plugin (or "
            "report the sglang release), or run --attention-backend aiter meanwhile."
        )
    return specs


def _shadow(backend: Any, marker: str, why: str, *,
            before: Callable[[str, Any], None] | None = None,
            after: Callable[[Any], None] | None = None) -> None:
    """Wrap each graph metadata method of this instance once per ``marker`` with ``before(name,
    batch)`` and ``after(batch)`` around upstream's method."""
    for name in METADATA_METHODS:
        method = getattr(backend, name, None)
        if method is not None and not getattr(method, marker, False):
            setattr(backend, name, _around(method, name, marker, why, before, after))


_BATCH_FIELDS = ("req_pool_indices", "seq_lens", "seq_lens_sum", "seq_lens_cpu", "forward_mode",
                 "spec_info")


def _around(method: Callable[..., Any], name: str, marker: str, why: str,
            before: Callable[[str, Any], None] | None,
            after: Callable[[Any], None] | None) -> Callable[..., Any]:
    """``method`` with the hooks around it, each given the batch the call describes (read from
    its ``bs`` or ``forward_batch``)."""
    params = list(inspect.signature(method).parameters)
    if "bs" not in params and "forward_batch" not in params:
        raise RuntimeError(
            f"{name}{inspect.signature(method)} takes neither 'bs' nor 'forward_batch'; this "
            f"sglang changed its metadata interface, so {why}"
        )

    @functools.wraps(method)
    def around(*args: Any, **kw: Any) -> Any:
        given = {**dict(zip(params, args, strict=False)), **kw}
        forward_batch: Any = given.get("forward_batch")
        size = given["bs"] if "bs" in given else forward_batch.batch_size
        batch = SimpleNamespace(batch_size=size, **{
            f: given[f] if f in given else getattr(forward_batch, f, None) for f in _BATCH_FIELDS})
        if before is not None:
            before(name, batch)
        result = method(*args, **kw)
        if after is not None:
            after(batch)
        return result

    setattr(around, marker, True)
    return around


def is_checked(method: Any) -> bool:
    """Whether ``method`` is a wrapper made by :func:`install_bounds_check`."""
    return bool(getattr(method, _CHECKED, False))


def install_bounds_check(backend: Any, capacity: int, extra_per_row: int = 0) -> list[str]:
    """Before upstream's graph metadata runs, raise :class:`BatchTooLargeError` for more rows than
    ``capacity`` or more entries (``seq_lens_sum`` x ``topk`` + ``extra_per_row`` a row) than a
    row of ``cuda_graph_kv_indices`` holds; returns the names checked; idempotent."""
    _shadow(backend, _CHECKED, "SGLANG_AITER_EXT_BOUNDS_CHECK=1 cannot check it. Unset the "
            "variable (or report the sglang release to sglang-aiter-plugin).",
            before=functools.partial(_check, backend, capacity, extra_per_row))
    return [n for n in METADATA_METHODS if is_checked(getattr(backend, n, None))]


def _check(backend: Any, capacity: int, extra: int, name: str, batch: Any) -> None:
    where = f"{type(backend).__name__}.{name}"
    bs = int(batch.batch_size)
    if bs > capacity:
        raise BatchTooLargeError(
            f"{where}: a batch of {bs} rows, but CUDA graphs were captured for at most "
            f"{capacity} (the per-batch buffers hold {capacity} rows); nothing was written. "
            "sglang's graph runner runs larger batches eagerly; whatever called this must do "
            f"the same, or capture graphs up to {bs} (--cuda-graph-max-bs)."
        )
    indices = getattr(backend, "cuda_graph_kv_indices", None)
    if indices is None or batch.seq_lens is None:
        return
    total = batch.seq_lens_sum
    if total is None:
        total = int(batch.seq_lens[:bs].sum())
    topk = int(getattr(backend, "topk", 1) or 1)
    need, room = int(total) * topk + bs * extra, int(indices.shape[-1])
    if need > room:
        raise BatchTooLargeError(
            f"{where}: a batch whose seq_lens_sum is {total} (x topk {topk}, + {extra} per row) "
            f"needs {need} entries of cuda_graph_kv_indices, which holds {room} per row; "
            "nothing was written. A longer batch than the graphs were set up for reached the "
            "graph metadata: run it eagerly, or report the caller to sglang-aiter-plugin."
        )


def _install_page_table_fill(backend: Any) -> None:
    """``unified-page-table``: after upstream's graph metadata for a decode batch, copy each row's
    page indices (its ``req_to_token`` row) into the page table, as eager decode builds it."""

    def fill(batch: Any) -> None:
        if batch.spec_info is not None or not batch.forward_mode.is_decode_or_idle():
            return
        bs = int(batch.batch_size)
        lens = batch.seq_lens_cpu if batch.seq_lens_cpu is not None else batch.seq_lens
        width = int(lens[:bs].max()) if bs else 0
        rows = backend.req_to_token[batch.req_pool_indices[:bs], :width]
        table = getattr(backend, "cuda_graph_page_table", None)  # its own (0.5.13+)
        if table is None:  # else a view of the indices, one page (here a token) per entry
            table = backend.cuda_graph_kv_indices.view(-1, int(backend.max_context_len))
        table[:bs, :width].copy_(rows)

    _shadow(backend, _FILLS_PAGE_TABLE, "aiter-ext cannot fill the unified page table its graphs "
            "read. Use --attention-backend aiter with --page-size > 1 (or report the sglang "
            "release to sglang-aiter-plugin).", after=fill)


def _widen(owner: Any, name: str, need: int, known: dict[int, str], multiple_of: int = 1,
           leading: tuple[int, ...] = ()) -> bool:
    """Give ``owner.name`` ``need`` zeroed entries (per leading row) where upstream left fewer in
    a ``known`` layout (entries -> releases); return whether it did; raise for an unknown one."""
    buffer: torch.Tensor = getattr(owner, name)
    have = int(buffer.shape[-1]) if leading else int(buffer.numel())
    if have >= need:
        return False
    if have not in known:
        layouts = "; ".join(f"{n} ({where})" for n, where in known.items())
        upstream = next(c for c in type(owner).__mro__ if c.__module__.startswith("sglang."))
        raise UnknownGraphLayoutError(
            f"sglang {installed_sglang_version()}: {upstream.__name__}."
            f"init_cuda_graph_state allocated {name} with {have} entries, fewer than the {need} "
            f"its graph replays write, in a layout sglang-aiter-plugin does not know (it knows "
            f"{layouts}). Use --attention-backend aiter, or a sglang-aiter-plugin release that "
            "supports this sglang."
        )
    size = -(-need // multiple_of) * multiple_of
    setattr(owner, name, torch.zeros((*leading, size), dtype=buffer.dtype, device=buffer.device))
    return True


class PooledGraphState:
    """Mixin before sglang's backend class: ``init_cuda_graph_state`` grows the pool to ``max_bs``,
    runs upstream's set-up, rights what it leaves wrong beyond the rows, verifies every binding,
    freezes the pool and installs the bounds check if asked for."""

    buffer_pool: BufferPool

    def _before_upstream(self, max_bs: int) -> None:
        """Checks that must hold before upstream's set-up runs (none by default)."""

    def _after_upstream(self, max_bs: int, max_num_tokens: int, lent: bool) -> None:
        """What upstream's set-up leaves wrong beyond the rows (nothing by default)."""

    def _extra_per_row(self) -> int:
        """Entries a graph replay writes per row beyond ``seq_len * topk`` (the bounds check)."""
        return int(getattr(self, "num_draft_tokens", None) or 0)

    def init_cuda_graph_state(
        self, max_bs: int, max_num_tokens: int, *args: Any, **kw: Any
    ) -> None:
        pool = self.buffer_pool
        owner = type(self).__name__
        check = bounds_check_requested()
        reason = f"{owner}.init_cuda_graph_state(max_bs={max_bs})"
        pool.grow(max_bs, reason=reason)
        self._before_upstream(max_bs)
        super().init_cuda_graph_state(max_bs, max_num_tokens, *args, **kw)  # type: ignore[misc]
        lent = bool(args) or kw.get("kv_indices_buf") is not None
        self._after_upstream(max_bs, max_num_tokens, lent)
        stale = pool.stale_bindings()
        if stale:
            raise RuntimeError(
                f"{owner}: sglang's init_cuda_graph_state replaced pooled buffers behind the "
                f"pool: {stale}. This sglang release is not supported by sglang-aiter-plugin; "
                "run --attention-backend aiter meanwhile."
            )
        pool.freeze(FROZEN_REASON)
        if check:
            install_bounds_check(self, pool.capacity, self._extra_per_row())


class AiterExtAttnBackend(PooledGraphState, AiterAttnBackend):  # type: ignore[misc]
    """sglang's AITER backend whose per-batch buffers grow, together, to the captured batch."""

    cuda_graph_kv_indices: torch.Tensor
    fixed_defects: tuple[str, ...] = ()
    """Names in the backend's ``DEFECTS`` that graph set-up found and fixed on this instance."""

    def __init__(
        self,
        model_runner: Any,
        skip_prefill: bool = False,
        kv_indptr_buf: Any = None,
        topk: int = 1,
    ) -> None:
        super().__init__(model_runner, skip_prefill, kv_indptr_buf, topk)
        capacity = batch_capacity(model_runner)  # every path's largest batch, not only P
        borrowed = frozenset({"kv_indptr"}) if kv_indptr_buf is not None else frozenset()
        specs = discover(self, int(model_runner.req_to_token_pool.size), skip=borrowed)
        adopt = {s.name: getattr(self, s.name) for s in specs}
        self.buffer_pool = BufferPool(self, specs, capacity, self.device, adopt=adopt)
        for name in self.buffer_pool.names():
            self.buffer_pool.bind(self, name, name)
            for updater in (getattr(self, attr, None) for attr in PREFILL_UPDATERS):
                if getattr(updater, name, None) is not None:  # None without that updater
                    self.buffer_pool.bind(updater, name, name)

    def _before_upstream(self, max_bs: int) -> None:
        if "kv_indptr" not in self.buffer_pool.names() and self.kv_indptr.shape[-1] < max_bs + 1:
            raise RuntimeError(
                f"kv_indptr lent to this backend holds {self.kv_indptr.shape[-1]} entries, fewer "
                f"than max_bs + 1 = {max_bs + 1}: the owner (the multi-step draft backend) must "
                "grow it before its children's init_cuda_graph_state"
            )

    def _after_upstream(self, max_bs: int, max_num_tokens: int, lent: bool) -> None:
        """Widen ``cuda_graph_kv_indices`` (unless lent) and ``cuda_graph_custom_mask``; fill the
        unified page table at page size 1 (the defects named in ``_fixed``)."""
        context, page = int(self.max_context_len), int(self.page_size)
        blocks, drafts = -(-context // page), self._extra_per_row()
        # one entry per token of every page, plus the draft tokens MLA target-verify adds per row
        # (the layout sglang allocates from 0.5.13, sglang#24587)
        need = max_bs * (blocks * page + drafts)
        if not lent and _widen(self, "cuda_graph_kv_indices", need, known={
                max_bs * blocks: "one per page, 0.5.11-0.5.12.post1"}, multiple_of=blocks):
            # whole pages per row: 0.5.11-0.5.12.post1 also view it as the unified page table
            self._fixed("kv-indices-per-page", page > 1)
            self._fixed("verify-draft-slack", need > max_bs * blocks * page)
        mask = getattr(self, "cuda_graph_custom_mask", None)
        if mask is not None and drafts and _widen(
                self, "cuda_graph_custom_mask", max_num_tokens * (context + drafts),
                known={max_num_tokens * context: "max_num_tokens x context, 0.5.11-"}):
            self._fixed("verify-custom-mask", True)
        if (not lent and page == 1
                and getattr(self, "decode_uses_page_table", self.use_triton_unified_attention)
                and not self.use_sliding_window_kv_pool and not self.use_mla):
            _install_page_table_fill(self)
            self._fixed("unified-page-table", True)

    def _fixed(self, defect: str, really: bool) -> None:
        if really and defect not in self.fixed_defects:
            self.fixed_defects += (defect,)


class AiterExtMultiStepDraftBackend(PooledGraphState, AiterMultiStepDraftBackend):  # type: ignore[misc]
    """sglang's EAGLE draft wrapper with its shared ``kv_indptr`` (``(steps, P * topk + 1)``, row
    ``i`` lent to child ``i``) pooled: growth re-points the wrapper and every child's row."""

    cuda_graph_kv_indices: torch.Tensor
    fixed_defects: tuple[str, ...] = ()

    def __init__(self, model_runner: Any, topk: int, speculative_num_steps: int) -> None:
        # Upstream builds its per-step children through the module-global name AiterAttnBackend.
        init = rebound(
            AiterMultiStepDraftBackend.__init__, {"AiterAttnBackend": AiterExtAttnBackend}
        )
        init(self, model_runner, topk, speculative_num_steps)
        wrong = [
            type(c).__name__ for c in self.attn_backends if not isinstance(c, AiterExtAttnBackend)
        ]
        if wrong:
            raise RuntimeError(f"draft children were built as {wrong}, not AiterExtAttnBackend")
        spec = BufferSpec("kv_indptr", torch.int32, Fill.ZEROS, per_row=int(topk), extra=1,
                          leading=(int(speculative_num_steps),))
        self.buffer_pool = BufferPool(self, [spec], batch_capacity(model_runner), self.device,
                                      adopt={"kv_indptr": self.kv_indptr})
        self.buffer_pool.bind(self, "kv_indptr", "kv_indptr")
        for step, child in enumerate(self.attn_backends):
            self.buffer_pool.bind(child, "kv_indptr", "kv_indptr", row=step)

    def _extra_per_row(self) -> int:
        return int(self.speculative_num_steps)  # each step appends one token per sequence

    def _after_upstream(self, max_bs: int, max_num_tokens: int, lent: bool) -> None:
        """Widen each step's row of ``cuda_graph_kv_indices`` by the steps' appended tokens and
        hand every child its new row."""
        topk, steps, context = int(self.topk), int(self.speculative_num_steps), int(
            self.max_context_len)
        page = int(self.attn_backends[0].page_size) if self.attn_backends else 1
        blocks = -(-context // page)  # whole pages per row: children may view it as pages
        if _widen(self, "cuda_graph_kv_indices", max_bs * topk * (context + steps), known={
                max_bs * topk * context: "max_bs x topk x context, 0.5.13-",
                max_num_tokens * context: "max_num_tokens x context, 0.5.11-0.5.12.post1"},
                multiple_of=blocks, leading=(steps,)):
            for step, child in enumerate(self.attn_backends):
                child.cuda_graph_kv_indices = self.cuda_graph_kv_indices[step]
            self.fixed_defects = ("draft-kv-indices-steps",)
