"""What a fix is to pluggy: the hook every fix implements (it runs at plugin load, never per
decode step), the context it is called with, and the markers of both."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple, TypeVar

import pluggy

if TYPE_CHECKING:
    from packaging.version import Version

    from sglang_aiter_plugin._status import FixStatus

__all__ = ["PROJECT", "FixContext", "aiter_ext_apply_fix", "hookimpl"]

PROJECT = "sglang_aiter_plugin"

_F = TypeVar("_F", bound=Callable[..., Any])
hookimpl: Callable[[_F], _F] = pluggy.HookimplMarker(PROJECT)
"""Marks a fix's implementation of :func:`aiter_ext_apply_fix`."""
hookspec = pluggy.HookspecMarker(PROJECT)


class FixContext(NamedTuple):
    """What a fix may look at when it decides whether and how to apply.

    ``sglang_version``: ``None`` when sglang's metadata cannot be read; ``report``: report a
    later outcome (a fix that returned ``pending`` calls it once its deferred work has run; the
    log and ``doctor`` then show it; a context built without one drops them)."""

    sglang_version: Version | None
    report: Callable[[FixStatus], None] = lambda status: None


@hookspec
def aiter_ext_apply_fix(context: FixContext) -> FixStatus:  # type: ignore[empty-body]
    """Probe whether the fix is needed here and apply it; report what happened, as
    ``FixStatus(name, FixState.<state>, detail)`` (the name is the registry's whatever the fix
    says; the states: ``applied``, ``pending`` with ``waiting_for``, ``not needed``, ``skipped``,
    ``failed``). Called once per process that loads plugins, from ``register()``: it must be
    cheap. Raising makes the fix ``failed``; prefer ``skipped``/``not needed`` with a reason. The
    plugin also carries its entry in the plugin's ledger as ``ledger``
    (:class:`~sglang_aiter_plugin._ledger.Defect`)."""
