"""Opt-in batch-size check on the CUDA-graph metadata calls (``SGLANG_AITER_EXT_BOUNDS_CHECK=1``).

After ``init_cuda_graph_state(max_bs)`` every per-batch buffer holds ``max_bs`` rows and the pool
is frozen. sglang's decode graph runner captures and replays only batches up to that ``max_bs``
(``can_run`` sends larger ones down the eager path), so in sglang the metadata calls never see more
rows than the pool holds. A caller that breaks this (another graph runner, a plugin, a future
sglang) reaches upstream's metadata code, which slices the buffers short and then, depending on the
path, fails on a tensor shape mismatch, leaves metadata for fewer rows than asked, or launches a
Triton kernel over more rows than exist.

By default nothing is added to the per-step path: the metadata methods are upstream's own. With the
switch on, :func:`install_bounds_check` shadows each metadata method of one backend instance with a
check that raises :class:`BatchTooLargeError` before upstream's code runs, so nothing is written.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from sglang_aiter_plugin._errors import AiterExtError

__all__ = ["METADATA_METHODS", "BatchTooLargeError", "install_bounds_check", "is_checked"]

METADATA_METHODS = (
    "init_forward_metadata_capture_cuda_graph",
    "init_forward_metadata_replay_cuda_graph",
    "init_forward_metadata_out_graph",
)
"""Entry points that write a captured batch's metadata (0.5.11-0.5.17: capture/replay;
0.5.18+: ``out_graph``, for capture and replay)."""

_CHECKED = "__aiter_ext_bounds_checked__"


class BatchTooLargeError(AiterExtError, ValueError):
    """A CUDA-graph metadata call asked for more batch rows than the frozen pool holds."""


def is_checked(method: Any) -> bool:
    """Whether ``method`` is a bounds-checked wrapper made here."""
    return bool(getattr(method, _CHECKED, False))


def install_bounds_check(backend: Any, capacity: int) -> list[str]:
    """Shadow ``backend``'s metadata methods with a check against ``capacity`` rows.

    Returns the names checked. Idempotent. Raises ``RuntimeError`` when a metadata method takes
    neither ``bs`` nor ``forward_batch`` (a changed sglang: the check could not see the size).
    """
    owner = type(backend).__name__
    checked = []
    for name in METADATA_METHODS:
        method = getattr(backend, name, None)
        if method is None:
            continue
        if is_checked(method):
            checked.append(name)
            continue
        setattr(backend, name, _checked(method, name, owner, capacity))
        checked.append(name)
    return checked


def _checked(
    method: Callable[..., Any], name: str, owner: str, capacity: int
) -> Callable[..., Any]:
    params = list(inspect.signature(method).parameters)
    key = next((k for k in ("bs", "forward_batch") if k in params), None)
    if key is None:
        raise RuntimeError(
            f"{name}{inspect.signature(method)} takes neither 'bs' nor 'forward_batch'; this "
            "sglang changed its metadata interface, so SGLANG_AITER_EXT_BOUNDS_CHECK=1 cannot "
            "check it. Unset the variable (or report the sglang release to sglang-aiter-plugin)."
        )
    pos, of_batch = params.index(key), key == "forward_batch"

    @functools.wraps(method)
    def checked(*args: Any, **kw: Any) -> Any:
        given = args[pos] if len(args) > pos else kw[key]
        bs = given.batch_size if of_batch else given
        if bs > capacity:
            raise BatchTooLargeError(
                f"{owner}.{name}: a batch of {bs} rows, but CUDA graphs were captured for at most "
                f"{capacity} (the per-batch buffers hold {capacity} rows); nothing was written. "
                "sglang's graph runner runs larger batches eagerly; whatever called this must do "
                f"the same, or capture graphs up to {bs} (--cuda-graph-max-bs)."
            )
        return method(*args, **kw)

    setattr(checked, _CHECKED, True)
    return checked
