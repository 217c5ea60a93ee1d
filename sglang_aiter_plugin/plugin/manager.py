"""The plugin manager: built-in fixes, then third-party fixes from entry points.

Built as pluggy's and tox's authors use pluggy: a fix switched off by the user is *blocked*
(``set_blocked``) and its module never imported; two fixes claiming one name are both reported
(the second is not loaded), never silently dropped; a third-party fix that fails to load is a
``failed`` status, and the others still apply. Callers use :func:`get_manager` and its typed
methods; :attr:`PluginManager.pluggy` is there for embedders that need pluggy itself.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

import pluggy

from sglang_aiter_plugin._status import FixState, FixStatus
from sglang_aiter_plugin._switches import DISABLE_VAR
from sglang_aiter_plugin.fixes import BUILTIN_FIXES
from sglang_aiter_plugin.plugin import FIXES_GROUP, NAME, spec
from sglang_aiter_plugin.plugin.spec import FixContext, PoolResize

__all__ = ["FixSource", "PluginManager", "fix_sources", "get_manager"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FixSource:
    """Where a fix comes from: a built-in module, or a third-party entry point (not loaded yet)."""

    name: str
    module: str | None = None
    entry_point: EntryPoint | None = None

    @property
    def origin(self) -> str:
        if self.entry_point is None:
            return f"built-in {self.module}"
        dist = getattr(self.entry_point.dist, "name", None) or "an unknown distribution"
        return f"{self.entry_point.value} (from {dist})"


def fix_sources() -> tuple[list[FixSource], list[FixStatus]]:
    """Every fix name on offer, in application order, without importing any of them.

    Returns the sources and a ``failed`` status for each entry point whose name is already taken.
    """
    sources = [FixSource(name, module=module) for name, module in BUILTIN_FIXES]
    taken = {s.name: s for s in sources}
    problems = []
    for ep in entry_points(group=FIXES_GROUP):
        source = FixSource(ep.name, entry_point=ep)
        first = taken.get(ep.name)
        if first is not None:
            problems.append(FixStatus(
                ep.name, FixState.FAILED,
                f"{source.origin} is not loaded: the fix name {ep.name!r} is already taken by "
                f"{first.origin}; rename one of the entry points (group {FIXES_GROUP})",
            ))
            continue
        taken[ep.name] = source
        sources.append(source)
    return sources, problems


class PluginManager:
    """Typed facade over a :class:`pluggy.PluginManager` for this project's hooks."""

    def __init__(
        self,
        sources: Sequence[FixSource] | None = None,
        *,
        blocked: Collection[str] = (),
        problems: Sequence[FixStatus] = (),
    ) -> None:
        """Register ``sources`` (default: :func:`fix_sources`), blocking those in ``blocked``."""
        if sources is None:
            sources, problems = fix_sources()
        self.pluggy = pluggy.PluginManager(NAME)
        self.pluggy.add_hookspecs(spec)
        self._order = [s.name for s in sources]
        self._problems: list[FixStatus] = list(problems)
        for source in sources:
            if source.name in blocked:
                self.pluggy.set_blocked(source.name)
                continue
            try:
                plugin: Any = (
                    source.entry_point.load() if source.entry_point is not None
                    else importlib.import_module(str(source.module))
                )
                self.pluggy.register(plugin, name=source.name)
            except Exception as exc:  # a broken third-party fix must not stop the others
                self._problems.append(FixStatus(
                    source.name, FixState.FAILED,
                    f"cannot load {source.origin}: {type(exc).__name__}: {exc}",
                ))
        try:
            self.pluggy.check_pending()
        except pluggy.PluginValidationError as exc:
            self._problems.append(FixStatus(str(exc.plugin), FixState.FAILED, str(exc)))

    def fix_names(self) -> list[str]:
        """Every fix name on offer, applied or not, in application order."""
        return list(self._order)

    def apply_fixes(self, context: FixContext) -> list[FixStatus]:
        """Run every registered fix once, each isolated from the others' failures."""
        impls = {i.plugin_name: i for i in self.pluggy.hook.aiter_ext_apply_fix.get_hookimpls()}
        failed = {p.name for p in self._problems}
        statuses: list[FixStatus] = list(self._problems)
        for name in self._order:
            if name in failed:
                continue
            if self.pluggy.is_blocked(name):
                statuses.append(FixStatus(name, FixState.DISABLED, f"listed in {DISABLE_VAR}"))
            elif name in impls:  # plugins that only observe the pool are not fixes
                statuses.append(_call_fix(name, impls[name].function, context))
        return statuses

    def announce_resize(self, event: PoolResize) -> None:
        """Tell every observer that a pool grew (cold path: CUDA-graph set-up)."""
        self.pluggy.hook.aiter_ext_pool_resized(event=event)


def _call_fix(name: str, function: Any, context: FixContext) -> FixStatus:
    try:
        result = function(context=context)
    except Exception as exc:
        logger.debug("fix %s raised", name, exc_info=True)
        return FixStatus(name, FixState.FAILED, f"{type(exc).__name__}: {exc}")
    if not isinstance(result, FixStatus):
        return FixStatus(name, FixState.FAILED, f"returned {result!r}, not a FixStatus")
    if result.name != name:
        return FixStatus(name, result.state, result.detail)
    return result


_lock = threading.RLock()
_manager: PluginManager | None = None


def get_manager(
    sources: Sequence[FixSource] | None = None,
    *,
    blocked: Collection[str] = (),
    problems: Sequence[FixStatus] = (),
) -> PluginManager:
    """The process-wide manager; the first call creates it from these arguments."""
    global _manager
    with _lock:
        if _manager is None:
            _manager = PluginManager(sources, blocked=blocked, problems=problems)
        return _manager
