"""Hooks around upstream's CUDA-graph metadata methods, on one backend instance: the bounds check
before them, the unified page-table fill after them."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from sglang_aiter_plugin._errors import AiterExtError
from sglang_aiter_plugin._patch import wrap_once

__all__ = ["METADATA_METHODS", "MetadataInterfaceError", "wrap_metadata_methods"]

#: Entry points that write a captured batch's metadata (0.5.11-0.5.17: capture/replay;
#: 0.5.18+: ``out_graph``, for capture and replay).
METADATA_METHODS = (
    "init_forward_metadata_capture_cuda_graph",
    "init_forward_metadata_replay_cuda_graph",
    "init_forward_metadata_out_graph",
)


class MetadataInterfaceError(AiterExtError, RuntimeError):
    """Upstream's graph metadata method no longer takes the batch in a form known here."""


def wrap_metadata_methods(backend: Any, patch: str, why: str, *,
                          before: Callable[[str, Any], None] | None = None,
                          after: Callable[[Any], None] | None = None) -> None:
    """Wrap each graph metadata method of this instance once as ``patch``, with
    ``before(name, batch)`` and ``after(batch)`` around upstream's method."""
    for name in METADATA_METHODS:
        if getattr(backend, name, None) is not None:
            wrap_once(backend, name, patch,
                      functools.partial(_around, name=name, why=why, before=before, after=after))


_BATCH_FIELDS = ("req_pool_indices", "seq_lens", "seq_lens_sum", "seq_lens_cpu", "forward_mode",
                 "spec_info")


def _around(method: Callable[..., Any], *, name: str, why: str,
            before: Callable[[str, Any], None] | None,
            after: Callable[[Any], None] | None) -> Callable[..., Any]:
    """``method`` with the hooks around it, each given the batch the call describes (read from
    its ``bs`` or ``forward_batch``)."""
    params = list(inspect.signature(method).parameters)
    if "bs" not in params and "forward_batch" not in params:
        raise MetadataInterfaceError(
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

    return around
