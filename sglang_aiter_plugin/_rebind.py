"""Run one of sglang's functions with some of the names it looks up resolved to other objects
(``AiterAttnBackend`` -> ``AiterExtAttnBackend``, ``is_hip`` -> ``True``), as a *copy*: nothing
sglang reads is modified, so there is nothing to restore and nothing another thread can observe.
"""

from __future__ import annotations

import builtins
import functools
import types
from collections.abc import Callable, Mapping
from typing import Any

from sglang_aiter_plugin._errors import AiterExtError

__all__ = ["NotRebindableError", "Overlay", "RebindError", "looks_up", "rebound"]


class RebindError(AiterExtError, RuntimeError):
    """The function no longer looks up a name the plugin must resolve differently."""


class NotRebindableError(AiterExtError, TypeError):
    """Only a plain Python function can be copied with other names resolved."""


class Overlay:
    """``real``, except that the names in ``fixed`` answer with the objects given there (what
    ``from module import name`` sees inside a copy, a simulated platform, a coordinator handed
    another communicator). A name missing on both stays missing."""

    def __init__(self, real: Any, fixed: Mapping[str, Any]) -> None:
        self._real, self._fixed = real, fixed

    def __getattr__(self, name: str) -> Any:
        return self._fixed[name] if name in self._fixed else getattr(self._real, name)


def _importer(module: str, names: Mapping[str, Any]) -> Callable[..., Any]:
    real_import = builtins.__import__

    def __import__(name: str, globals: Any = None, locals: Any = None,
                   fromlist: Any = (), level: int = 0) -> Any:
        if level == 0 and name == module and fromlist:
            if all(n in names for n in fromlist):  # module not imported: it may be absent here
                return types.SimpleNamespace(**{n: names[n] for n in fromlist})
            if any(n in names for n in fromlist):
                return Overlay(real_import(name, globals, locals, fromlist, level), names)
        return real_import(name, globals, locals, fromlist, level)

    return __import__


def rebound(fn: Callable[..., Any], names: Mapping[str, Any], *, module: str | None = None,
            strict: bool = True) -> Callable[..., Any]:
    """A copy of ``fn`` in which each of ``names`` resolves to the given object, as a global and,
    with ``module``, through ``from <module> import <name>`` inside ``fn`` (``module`` is not
    imported when every name asked for is given). ``strict``: raise :class:`RebindError` when
    ``fn`` does not mention one of the names (the copy would silently use sglang's object)."""
    if not isinstance(fn, types.FunctionType):
        raise NotRebindableError(f"can only rebind plain Python functions, not {type(fn).__name__}")
    missing = sorted(set(names) - _names_used(fn.__code__)) if strict else []
    if missing:
        raise RebindError(
            f"{fn.__module__}.{fn.__qualname__} no longer looks up {missing}; this sglang "
            "release builds those objects another way, so sglang-aiter-plugin cannot make it "
            "build its own. Please report the sglang release."
        )
    namespace = {**fn.__globals__, **names}
    if module is not None:
        namespace["__builtins__"] = {**vars(builtins), "__import__": _importer(module, names)}
    copy = types.FunctionType(fn.__code__, namespace, fn.__name__, fn.__defaults__,
                              fn.__closure__)
    copy.__kwdefaults__ = fn.__kwdefaults__
    return functools.update_wrapper(copy, fn)  # its qualified name, docstring, ``__wrapped__``


def looks_up(fn: Callable[..., Any], name: str) -> bool:
    """Whether ``fn`` (a plain Python function) looks up ``name`` as a global or attribute, so
    that :func:`rebound` can resolve it to another object."""
    return isinstance(fn, types.FunctionType) and name in _names_used(fn.__code__)


def _names_used(code: types.CodeType) -> set[str]:
    """Global and attribute names ``code`` looks up, nested code (comprehensions) included."""
    used = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            used |= _names_used(const)
    return used
