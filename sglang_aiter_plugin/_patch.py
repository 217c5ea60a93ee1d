"""The one way the plugin changes a function of sglang's (every patch): :func:`wrap_once`.

A patch is found again below any layer that keeps ``__wrapped__`` (sglang's hook registry, another
plugin), so applying it a second time (a second ``register()``, a second graph set-up) changes
nothing.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["MARK", "patched", "patches", "wrap_once"]

MARK = "__sglang_aiter_plugin_patch__"  # on every wrapper wrap_once makes: the patch's name

_lock = threading.RLock()


def patches(fn: Any) -> list[str]:
    """The names of the plugin's patches on ``fn``, outermost first, found through
    ``__wrapped__``."""
    seen: set[int] = set()
    found: list[str] = []
    while fn is not None and id(fn) not in seen:
        seen.add(id(fn))
        mark = getattr(fn, MARK, None)
        if mark is not None:
            found.append(mark)
        fn = getattr(fn, "__wrapped__", None)
    return found


def patched(fn: Any, patch: str | None = None) -> bool:
    """Whether ``fn`` is, or wraps through ``__wrapped__``, a wrapper of ``patch`` (``None``: of
    any patch of the plugin)."""
    found = patches(fn)
    return bool(found) if patch is None else patch in found


def wrap_once(holder: Any, name: str, patch: str,
              wrap: Callable[[Callable[..., Any]], Callable[..., Any]], *,
              item: bool = False) -> bool:
    """Replace ``holder.name`` (``holder[name]`` with ``item``) by ``wrap(current)``, keeping it as
    ``__wrapped__`` and marked as ``patch``; return ``False``, changing nothing, where
    ``current`` already is or wraps it."""
    with _lock:
        current = holder[name] if item else getattr(holder, name)
        if patched(current, patch):
            return False
        wrapper = functools.update_wrapper(wrap(current), current)
        setattr(wrapper, MARK, patch)
        if item:
            holder[name] = wrapper
        else:
            setattr(holder, name, wrapper)
        return True
