"""Install a wrapper on a ``GroupCoordinator`` method: once, directly on the class.

Why not sglang's ``HookRegistry``: for a target ``module.Class.method`` its ``apply_hooks``
resolves the class, wraps the method (an AROUND hook becomes
``wrapper(*args, **kwargs) -> hook(original, *args, **kwargs)``), sets it on the class, and then
runs ``_propagate_patch``, which walks every attribute of every loaded module to replace
``from module import name`` copies of the original. A method defined in a class body has no
such copy (``tests/fixes/collectives`` checks it with sglang's own ``_propagate_patch``), so for
these targets the walk finds nothing; it costs about 24 ms per target in a launcher process
(~3,500 modules). Setting the class attribute here is what ``apply_hooks`` would have done,
without the walk and without its extra call layer.

The wrapper keeps ``__wrapped__`` (so ``inspect.unwrap`` and the probes reach sglang's function)
and the method's name and docstring. Other plugins' ``HookRegistry`` hooks on the same method
still apply: sglang runs ``apply_hooks`` after every plugin's ``register()``, and it wraps
whatever the class holds then. Installing twice is a no-op (one layer per process).
"""

from __future__ import annotations

import functools
import threading
import types
from collections.abc import Callable
from typing import Any

__all__ = ["MARK", "install", "is_installed", "layers"]

MARK = "__sglang_aiter_plugin_collective__"
"""Attribute set on every wrapper this module installs (its value: the fix's name)."""
_lock = threading.Lock()

Wrap = Callable[[Callable[..., Any]], Callable[..., Any]]


def _chain(fn: Any) -> list[Any]:
    found = [fn]
    while hasattr(fn, "__wrapped__"):
        fn = fn.__wrapped__
        found.append(fn)
    return found


def is_installed(cls: type, name: str) -> bool:
    """Whether one of this module's wrappers is anywhere on ``cls.name``."""
    return any(hasattr(fn, MARK) for fn in _chain(vars(cls).get(name)))


def layers(cls: type, name: str) -> int:
    """How many wrappers (this plugin's and anyone's) sit on ``cls.name``."""
    return len(_chain(vars(cls).get(name))) - 1


def install(cls: type, name: str, wrap: Wrap, fix: str) -> bool:
    """Put ``wrap(current)`` on ``cls.name``; ``True`` if installed now, ``False`` if already.

    Raises ``TypeError`` if ``cls.name`` is not a plain function (a static or class method, a
    descriptor): the wrappers are written for instance methods.
    """
    with _lock:
        current = vars(cls)[name]
        if is_installed(cls, name):
            return False
        if not isinstance(current, types.FunctionType):
            raise TypeError(f"{cls.__name__}.{name} is {type(current).__name__}, not a function")
        wrapper = functools.update_wrapper(wrap(current), current)
        setattr(wrapper, MARK, fix)
        setattr(cls, name, wrapper)
        return True
