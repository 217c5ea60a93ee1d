"""The whole capture of a group's graphs: the communicator's registration flags as every reader
sees them inside ``GroupCoordinator.graph_capture``.

sglang's model code may choose a path by aiter's ``enable_register_for_capturing`` itself,
outside any ``GroupCoordinator`` method a collective wrapper sees: DeepSeek-V4.1's fused
all-reduce + hc_post (0.5.22+, ``_make_mhc_fusion`` in
``srt/models/deepseek_common/amd/deepseek_v4_fused_mhc.py``) runs a registered capture straight
on aiter's communicator while the flag is on. So where ``capture-all-reduce`` applies, it also
wraps ``graph_capture``, the scope in which sglang captures every graph of a group (aiter's
``capture()`` is entered there): inside it, the communicator's registration flags
(:data:`REGISTRATION_OFF`) read *off* whenever the fix's plan says the capture must not register,
and their own value otherwise. The plan is read at each access, so a graph variant marked per
graph counts, and a warm-up sees what the capture after it sees. Once the scope ends the
communicator is as it was: eager steps, and groups whose captures are under no condition, keep
the fast path.

How: for the scope, the communicator's class is a subclass whose flags are properties over the
instance's own values. Those stay in its ``__dict__`` (a write goes there too), where
:func:`own_flag` reads them for the plugin's own checks; the class is put back on exit.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from sglang_aiter_plugin._log import log

if TYPE_CHECKING:
    from sglang_aiter_plugin.fixes.collectives.plan import Plan

__all__ = ["REGISTRATION_OFF", "flags_follow", "own_flag", "wrapper"]

REGISTRATION_OFF = (("enable_register_for_capturing", False),  # aiter's communicator
                    ("tms_cudagraph", True))  # sglang's own (ROCm): registered=not tms_cudagraph
"""Each registration flag a communicator may have, and its value that means "do not register"."""

_SCOPE = "_sglang_aiter_plugin_capture_scope"  # in the communicator's __dict__ while in a scope
_views: dict[tuple[type, tuple[str, ...]], type] = {}
_warned: set[str] = set()


def own_flag(comm: Any, name: str, default: Any = True) -> Any:
    """The communicator's own value of flag ``name`` (``default`` where it has none), below
    the view a capture scope gives every other reader."""
    own = getattr(comm, "__dict__", {})
    return own[name] if name in own else getattr(comm, name, default)


def _flag(name: str, off: bool) -> property:
    def read(comm: Any) -> Any:
        values = vars(comm)
        return off if values[_SCOPE]() else values[name]

    def write(comm: Any, value: Any) -> None:
        vars(comm)[name] = value

    return property(read, write, doc=f"{name}: off while this capture must not register")


def _view_class(cls: type, names: tuple[str, ...]) -> type:
    """``cls`` with ``names`` read through the scope (one class per communicator class)."""
    key = (cls, names)
    if key not in _views:
        flags = {name: _flag(name, off) for name, off in REGISTRATION_OFF if name in names}
        _views[key] = type(cls.__name__, (cls,), {"__module__": cls.__module__,
                                                  "__qualname__": cls.__qualname__, **flags})
    return _views[key]


@contextlib.contextmanager
def flags_follow(comm: Any, unregistered: Callable[[], bool]) -> Iterator[None]:
    """In the block, ``comm``'s registration flags read off whenever ``unregistered()`` says
    so; a communicator already in a scope keeps that one."""
    names = tuple(name for name, _ in REGISTRATION_OFF if name in getattr(comm, "__dict__", {}))
    if not names or _SCOPE in vars(comm):
        yield
        return
    cls = type(comm)
    try:
        comm.__class__ = _view_class(cls, names)
    except TypeError as exc:  # a class whose instances cannot take another class
        if cls.__name__ not in _warned:
            _warned.add(cls.__name__)
            log(logging.WARNING, "sglang-aiter-plugin: %s's registration flags cannot be turned "
                "off for a whole graph capture (%s): only the plugin's own collective wrappers "
                "take their unregistered paths there", cls.__name__, exc, always=False)
        yield
        return
    vars(comm)[_SCOPE] = unregistered
    try:
        yield
    finally:
        del vars(comm)[_SCOPE]
        comm.__class__ = cls


def wrapper(original: Callable[..., Any], plan: Callable[[], Plan | None]) -> Callable[..., Any]:
    """The wrapper for sglang's ``GroupCoordinator.graph_capture`` (a context manager);
    ``plan``: the fix's plan as of the call."""

    @contextlib.contextmanager
    def scope(coordinator: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        with original(coordinator, *args, **kwargs) as context:
            comm, current = getattr(coordinator, "ca_comm", None), plan()
            if comm is None or current is None:
                yield context
                return
            with flags_follow(comm, lambda: current.unregistered(comm, coordinator)):
                yield context

    return scope
