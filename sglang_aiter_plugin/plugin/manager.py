"""The plugin manager of the fixes in :data:`~sglang_aiter_plugin.fixes.BUILTIN_FIXES`.

A fix the user switched off is blocked in pluggy, never imported. Every other fix is registered
under its name behind one guard (:func:`_call_fix`) and called through pluggy's hook call: a fix
that fails to load, has no implementation of the hook, raises or returns something else than a
:class:`FixStatus` is ``failed`` while the others apply (pluggy itself stops at the first
implementation that raises). The statuses come in the registry's order.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pluggy

from sglang_aiter_plugin._log import log
from sglang_aiter_plugin._status import FixState, FixStatus
from sglang_aiter_plugin.fixes import load
from sglang_aiter_plugin.plugin import spec
from sglang_aiter_plugin.plugin.spec import PROJECT, FixContext, hookimpl

__all__ = ["PluginManager"]

HOOK = "aiter_ext_apply_fix"


class _Guarded:
    """A fix as pluggy calls it: its own implementation behind the one guard."""

    def __init__(self, name: str, function: Any) -> None:
        self.name, self.function = name, function

    @hookimpl
    def aiter_ext_apply_fix(self, context: FixContext) -> FixStatus:
        return _call_fix(self.name, self.function, context)


class PluginManager:
    """Typed facade over a :class:`pluggy.PluginManager` holding the fixes."""

    def __init__(self, fixes: Sequence[tuple[str, str]], *,
                 blocked: Mapping[str, str] | None = None) -> None:
        """Register ``fixes`` (name, ``module[:object]``) in order; block those in ``blocked``
        (name -> why, the ``disabled`` status's detail)."""
        self.pluggy = pluggy.PluginManager(PROJECT)
        self.pluggy.add_hookspecs(spec)
        self._order = [name for name, _ in fixes]
        self._problems: dict[str, FixStatus] = {}  # the fixes that could not be registered
        self._blocked = dict(blocked or {})
        for name, value in fixes:
            if name in self._blocked:
                self.pluggy.set_blocked(name)
                continue
            try:
                plugin = load(value)
                implements = (hasattr(plugin, HOOK)
                              and self.pluggy.parse_hookimpl_opts(plugin, HOOK) is not None)
                if implements:
                    self.pluggy.register(_Guarded(name, getattr(plugin, HOOK)), name=name)
                else:
                    self._problems[name] = FixStatus(name, FixState.FAILED,
                        f"cannot apply built-in {value}: it has no {HOOK} marked @hookimpl")
            except Exception as exc:  # a broken install must not stop the other fixes
                self._problems[name] = FixStatus(name, FixState.FAILED,
                    f"cannot load built-in {value}: {type(exc).__name__}: {exc}")

    def apply_fixes(self, context: FixContext) -> list[FixStatus]:
        """Run every registered fix once, through pluggy's hook call, each isolated from the
        others' failures; the statuses in the registry's order."""
        returned = {s.name: s for s in self.pluggy.hook.aiter_ext_apply_fix(context=context)}
        statuses: list[FixStatus] = []
        for name in self._order:
            if self.pluggy.is_blocked(name):
                statuses.append(FixStatus(name, FixState.DISABLED, self._blocked[name]))
            else:  # registered and called, or not registered: its failure
                statuses.append(returned.get(name) or self._problems[name])
        return statuses


def _call_fix(name: str, function: Any, context: FixContext) -> FixStatus:
    """The one guard every fix runs behind: its status (under its registered name, later ones
    too), ``failed`` where it raises or returns something else."""

    def report_as(status: FixStatus) -> None:  # a later outcome is always this fix's
        context.report(status._replace(name=name))

    try:
        result = function(context=context._replace(report=report_as))
    except Exception as exc:
        log(logging.DEBUG, "fix %s raised", name, exc_info=True, always=False)
        return FixStatus(name, FixState.FAILED, f"{type(exc).__name__}: {exc}")
    if not isinstance(result, FixStatus):
        return FixStatus(name, FixState.FAILED, f"returned {result!r}, not a FixStatus")
    return result._replace(name=name)
