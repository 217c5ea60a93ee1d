"""Run one of sglang's functions with some of the names it looks up resolved to other objects.

The plugin needs sglang's *own* code to build the plugin's classes (``AiterAttnBackend`` ->
``AiterExtAttnBackend``), and its probes need sglang's own code to see a simulated platform
(``is_hip`` -> ``True``). sglang finds those names at call time, in its module's globals or through
a ``from <module> import <name>`` inside the function. :func:`rebound` makes a *copy* of the
function over a copy of its globals in which those names resolve to the given objects. Nothing
sglang (or anyone else) reads is modified: nothing to restore, nothing another thread can observe.
"""

from __future__ import annotations

import builtins
import types
from collections.abc import Callable, Mapping
from typing import Any

from sglang_aiter_plugin._errors import AiterExtError

__all__ = ["RebindError", "rebound"]


class RebindError(AiterExtError, RuntimeError):
    """The function no longer looks up a name the plugin must resolve differently."""


class _ModuleView:
    """``module`` except for ``names``: what ``from module import name`` sees inside the copy."""

    def __init__(self, module: types.ModuleType, names: Mapping[str, Any]) -> None:
        self._module, self._names = module, names

    def __getattr__(self, name: str) -> Any:
        return self._names[name] if name in self._names else getattr(self._module, name)


def _importer(module: str, names: Mapping[str, Any]) -> Callable[..., Any]:
    real_import = builtins.__import__

    def __import__(name: str, globals: Any = None, locals: Any = None,
                   fromlist: Any = (), level: int = 0) -> Any:
        if level == 0 and name == module and fromlist:
            if all(n in names for n in fromlist):  # module not imported: it may be absent here
                return types.SimpleNamespace(**{n: names[n] for n in fromlist})
            if any(n in names for n in fromlist):
                return _ModuleView(real_import(name, globals, locals, fromlist, level), names)
        return real_import(name, globals, locals, fromlist, level)

    return __import__


def rebound(fn: Callable[..., Any], names: Mapping[str, Any], *, module: str | None = None,
            strict: bool = True) -> Callable[..., Any]:
    """A copy of ``fn`` in which each of ``names`` resolves to the given object.

    Global lookups of those names see the given objects; with ``module``, so does
    ``from <module> import <name>`` inside ``fn`` (when every name such an import asks for is
    given, ``module`` itself is not imported). ``strict`` (the default) raises
    :class:`RebindError` when ``fn``'s code does not mention one of the names: the sglang release
    changed how it finds that object, and the copy would silently use sglang's.
    """
    if not isinstance(fn, types.FunctionType):
        raise TypeError(f"can only rebind plain Python functions, not {type(fn).__name__}")
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
    copy.__kwdefaults__, copy.__qualname__, copy.__doc__ = (fn.__kwdefaults__, fn.__qualname__,
                                                            fn.__doc__)
    copy.__wrapped__ = fn  # type: ignore[attr-defined]
    return copy


def _names_used(code: types.CodeType) -> set[str]:
    """Global and attribute names ``code`` looks up, nested code (comprehensions) included."""
    used = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            used |= _names_used(const)
    return used
