"""``mla-split-table`` (``backend.defects``; aiter#4587, #5193, #5194): every split table an MLA
decode graph reads, held by the backend for as long as it holds its graphs.

Where sglang lets aiter pick an MLA decode's KV splits (the non-persistent kernel, and no
``num_kv_splits_indptr`` in sglang's call), aiter's ``mla_decode_fwd`` takes
``(num_kv_splits, num_kv_splits_indptr)`` from ``get_meta_param``, a ``functools.lru_cache`` that
owns the indptr tensor. A captured graph reads that tensor's address at every replay. Once the
cache has evicted the graph's entry (128 other keys: eager decodes with other KV totals) the
tensor is freed, its memory is handed out again, and every replay reads whatever is written there.

Graph set-up decides by what the installed aiter's lookup does (:func:`decide`). Where it can
free a table, the backend gets copies of sglang's methods that call ``mla_decode_fwd``
(:func:`keep_split_tables`), in which that name resolves to a copy of aiter's own function whose
``get_meta_param`` is a :class:`SplitTableKeeper`: aiter's cached lookup, plus, while a graph is
being captured, a reference the backend keeps. Nothing of aiter or sglang is modified: aiter's
cache answers exactly as before, and a replay runs nothing more.
"""

from __future__ import annotations

import types
from typing import Any

import torch

from sglang_aiter_plugin._rebind import looks_up, rebound
from sglang_aiter_plugin._status import FixState, FixStatus

__all__ = ["KERNEL", "LOOKUP", "PATCH", "SplitTableKeeper", "callers", "decide",
           "keep_split_tables", "kernel_of"]

PATCH = "mla-split-table"
KERNEL = "mla_decode_fwd"
"""aiter's MLA decode, as sglang's backend module binds it (``from aiter.mla import ...``)."""
LOOKUP = "get_meta_param"
"""The split-table lookup aiter's ``mla_decode_fwd`` calls where it is handed no table."""


class SplitTableKeeper:
    """aiter's ``mla_decode_fwd`` as a copy whose split-table lookup also keeps, in :attr:`held`,
    each table it returns while the current stream is capturing a graph."""

    def __init__(self, kernel: Any) -> None:
        self._lookup = kernel.__globals__[LOOKUP]
        self.held: dict[int, Any] = {}
        """What the lookup returned to captured calls (by identity: aiter's cache hands the same
        object to every call with the same key)."""
        self.kernel = rebound(kernel, {LOOKUP: self._lookup_and_keep})

    def _lookup_and_keep(self, *args: Any, **kwargs: Any) -> Any:
        result = self._lookup(*args, **kwargs)
        capturing = torch.cuda.is_initialized() and (  # type: ignore[no-untyped-call]
            torch.cuda.is_current_stream_capturing())
        if capturing:
            self.held.setdefault(id(result), result)
        return result


def callers(cls: type) -> dict[str, types.FunctionType]:
    """The methods of ``cls`` (its own or inherited, as the instance resolves them) that call
    aiter's MLA decode by its module-global name."""
    found: dict[str, types.FunctionType] = {}
    for klass in reversed(cls.__mro__):  # the nearest definition wins
        for name, value in vars(klass).items():
            if isinstance(value, types.FunctionType):
                if looks_up(value, KERNEL):
                    found[name] = value
                else:
                    found.pop(name, None)
    return found


def decide(kernel: Any) -> tuple[FixState, str]:
    """What graph set-up does about aiter's split tables, by what ``kernel`` (the
    ``mla_decode_fwd`` sglang's backend calls) and its ``get_meta_param`` do."""
    if kernel is None:
        return FixState.SKIPPED, (f"sglang's aiter backend has no {KERNEL} here (aiter's MLA "
                                  "decode did not import)")
    if not isinstance(kernel, types.FunctionType):
        return FixState.FAILED, (
            f"aiter's {KERNEL} is a {type(kernel).__name__}, not a plain function, so aiter-ext "
            "cannot see which split table its graphs read: a replay after 128 other decode "
            "shapes may read a freed table (aiter#4587); report the aiter version")
    if not looks_up(kernel, LOOKUP):
        return FixState.NOT_NEEDED, (f"aiter's {KERNEL} looks up no cached split table "
                                     f"({LOOKUP})")
    lookup = kernel.__globals__.get(LOOKUP)
    parameters = getattr(lookup, "cache_parameters", None)
    if parameters is None and not hasattr(lookup, "cache_info"):
        return FixState.NOT_NEEDED, (
            f"aiter's {LOOKUP} builds a new split table at each call, so a graph's table is "
            "made during its capture and belongs to the graph")
    bound = parameters().get("maxsize", "unknown") if callable(parameters) else "unknown"
    if bound is None:
        return FixState.NOT_NEEDED, f"aiter's {LOOKUP} keeps every split table it made"
    return FixState.APPLIED, (
        f"aiter's {LOOKUP} caches at most {bound} split tables and frees the ones it evicts "
        "(aiter#4587): aiter-ext holds each table its graphs read for as long as it holds them")


def kernel_of(cls: type, methods: dict[str, types.FunctionType] | None = None) -> Any:
    """The ``mla_decode_fwd`` that ``cls``'s methods (``methods``: its :func:`callers`, where
    already found) call: ``None`` where none does, or where aiter's MLA decode did not import
    into sglang's module."""
    methods = callers(cls) if methods is None else methods
    return next(iter(methods.values())).__globals__.get(KERNEL) if methods else None


def keep_split_tables(backend: Any) -> FixStatus:
    """Decide for ``backend`` (an MLA ``AiterAttnBackend``) and, where aiter can free a table its
    graphs read, give it copies of its methods that call aiter's MLA decode through a
    :class:`SplitTableKeeper` (``backend.split_tables``). Idempotent."""
    methods = callers(type(backend))
    kernel = kernel_of(type(backend), methods)
    state, detail = decide(kernel)
    if state is FixState.APPLIED and getattr(backend, "split_tables", None) is None:
        keeper = SplitTableKeeper(kernel)
        for name, fn in methods.items():
            setattr(backend, name, types.MethodType(rebound(fn, {KERNEL: keeper.kernel}), backend))
        backend.split_tables = keeper
    return FixStatus(PATCH, state, detail)
