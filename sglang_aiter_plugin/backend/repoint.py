"""Built-in observer of ``aiter_ext_pool_resized``: re-point every attribute bound to the pool.

Registered by the plugin manager before any third-party plugin and run first (``tryfirst``), so an
observer from another package already sees the backend, its prefill updaters and the draft
backend's children holding the grown tensors. Imports neither torch nor sglang: the manager loads
it in every process.
"""

from __future__ import annotations

import pluggy

from sglang_aiter_plugin.plugin import NAME
from sglang_aiter_plugin.plugin.spec import PoolResize

__all__ = ["OBSERVER_NAME", "aiter_ext_pool_resized"]

OBSERVER_NAME = "aiter-ext-pool-repoint"

_first = pluggy.HookimplMarker(NAME)(tryfirst=True)


@_first
def aiter_ext_pool_resized(event: PoolResize) -> None:
    repoint = getattr(event.pool, "repoint", None)  # a BufferPool; others are not ours to touch
    if callable(repoint):
        repoint()
