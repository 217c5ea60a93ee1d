"""The plugin manager: built-in fixes, then third-party fixes from entry points.

Built-in fixes come from :data:`~sglang_aiter_plugin.fixes.BUILTIN_FIXES`, third-party ones from
the entry points of group :data:`FIXES_GROUP`. A fix the user switched off is blocked, never
imported; a second fix claiming a taken name is reported, not loaded; a fix that fails to load is
``failed`` while the others apply. ``register()`` installs the process-wide manager once.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection, Sequence
from importlib.metadata import EntryPoint, distributions
from typing import Any, NamedTuple

import pluggy

from sglang_aiter_plugin._status import FixState, FixStatus
from sglang_aiter_plugin._switches import DISABLE_VAR
from sglang_aiter_plugin.fixes import BUILTIN_FIXES
from sglang_aiter_plugin.plugin import FIXES_GROUP, HOOK_PREFIX, NAME, spec
from sglang_aiter_plugin.plugin.spec import FixContext, PoolResize

__all__ = ["FixSource", "PluginManager", "current_manager", "fix_sources", "install_manager"]

logger = logging.getLogger(__name__)
_HOOKS = tuple(name for name in spec.__all__ if name.startswith(HOOK_PREFIX))


class FixSource(NamedTuple):
    """A fix on offer: its name, how to load its plugin, and where it comes from (for messages)."""

    name: str
    load: Callable[[], object]
    origin: str

    @classmethod
    def builtin(cls, name: str, value: str) -> FixSource:  # value: ``module[:object]``
        return cls(name, EntryPoint(name, value, FIXES_GROUP).load, f"built-in {value}")

    @classmethod
    def third_party(cls, entry_point: EntryPoint) -> FixSource:
        dist = getattr(entry_point.dist, "name", None) or "an unknown distribution"
        return cls(entry_point.name, entry_point.load, f"{entry_point.value} (from {dist})")


def fix_sources() -> tuple[list[FixSource], list[FixStatus]]:
    """Every fix on offer, in application order, without importing any of them, and a
    ``failed`` status for each entry point whose name is already taken."""
    taken = {name: FixSource.builtin(name, value) for name, value in BUILTIN_FIXES}
    problems = []
    for ep in _entry_points(FIXES_GROUP):
        source = FixSource.third_party(ep)
        first = taken.setdefault(ep.name, source)
        if first is not source:  # reported under its own label; the first fix keeps the name
            problems.append(FixStatus(f"{ep.name} (duplicate)", FixState.FAILED,
                f"{source.origin} is not loaded: the fix name {ep.name!r} is already taken by "
                f"{first.origin}; rename one of the entry points (group {FIXES_GROUP})"))
    return list(taken.values()), problems


def _entry_points(group: str) -> list[EntryPoint]:
    """What ``importlib.metadata.entry_points(group=group)`` finds, parsing the entry points of
    only the distributions whose ``entry_points.txt`` names ``group``."""
    header = f"[{group}]"
    found: list[EntryPoint] = []
    seen: set[str] = set()
    for dist in distributions():
        if header not in (dist.read_text("entry_points.txt") or ""):
            continue
        name = re.sub(r"[-_.]+", "-", dist.name or "").lower()
        if name not in seen:  # the first on sys.path wins, as importlib.metadata decides
            seen.add(name)
            found.extend(ep for ep in dist.entry_points if ep.group == group)
    return found


class _PluggyManager(pluggy.PluginManager):
    """pluggy's manager, looking only at names starting with :data:`HOOK_PREFIX`."""

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        if not name.startswith(HOOK_PREFIX):
            return None
        return super().parse_hookimpl_opts(plugin, name)


class PluginManager:
    """Typed facade over a :class:`pluggy.PluginManager` for this project's hooks."""

    def __init__(self, sources: Sequence[FixSource], *, blocked: Collection[str] = (),
                 problems: Sequence[FixStatus] = ()) -> None:
        """Register ``sources`` (from :func:`fix_sources`), blocking those in ``blocked``."""
        self.pluggy: pluggy.PluginManager = _PluggyManager(NAME)
        self.pluggy.add_hookspecs(spec)
        self._order = [s.name for s in sources]
        self._problems: list[FixStatus] = list(problems)
        for source in sources:
            if source.name in blocked:
                self.pluggy.set_blocked(source.name)
                continue
            try:
                plugin = source.load()
                self.pluggy.register(plugin, name=source.name)
                if not self.pluggy.get_hookcallers(plugin):
                    self.pluggy.unregister(plugin)
                    raise LookupError(f"it implements no hook; name its functions after "
                                      f"{' or '.join(_HOOKS)} and mark them with @hookimpl")
            except Exception as exc:  # a broken third-party fix must not stop the others
                self._problems.append(FixStatus(source.name, FixState.FAILED,
                    f"cannot load {source.origin}: {type(exc).__name__}: {exc}"))
        try:
            self.pluggy.check_pending()
        except pluggy.PluginValidationError as exc:
            name = self.pluggy.get_name(exc.plugin) or repr(exc.plugin)
            self.pluggy.unregister(exc.plugin)
            self._problems.append(FixStatus(name, FixState.FAILED, str(exc)))

    def apply_fixes(self, context: FixContext) -> list[FixStatus]:
        """Run every registered fix once, each isolated from the others' failures."""
        impls = {i.plugin_name: i for i in self.pluggy.hook.aiter_ext_apply_fix.get_hookimpls()}
        statuses: list[FixStatus] = list(self._problems)
        for name in self._order:
            if self.pluggy.is_blocked(name):
                statuses.append(FixStatus(name, FixState.DISABLED, f"listed in {DISABLE_VAR}"))
            elif name in impls:  # not loaded, or only observes the pool: not a fix to run
                statuses.append(_call_fix(name, impls[name].function, context))
        return statuses

    def announce_resize(self, event: PoolResize) -> None:
        """Tell every observer that a pool grew (cold path: CUDA-graph set-up)."""
        self.pluggy.hook.aiter_ext_pool_resized(event=event)


def _call_fix(name: str, function: Any, context: FixContext) -> FixStatus:
    def report_as(status: FixStatus) -> None:  # a later outcome is always this fix's
        context.report(status._replace(name=name))

    try:
        result = function(context=context.with_report(report_as))
    except Exception as exc:
        logger.debug("fix %s raised", name, exc_info=True)
        return FixStatus(name, FixState.FAILED, f"{type(exc).__name__}: {exc}")
    if not isinstance(result, FixStatus):
        return FixStatus(name, FixState.FAILED, f"returned {result!r}, not a FixStatus")
    return result._replace(name=name)


_manager: PluginManager | None = None


def install_manager(manager: PluginManager) -> PluginManager:
    """Make ``manager`` the process-wide one (``register()`` does, once, with the switches)."""
    global _manager
    _manager = manager
    return manager


def current_manager() -> PluginManager | None:
    """The process-wide manager, or ``None`` before ``register()`` made one."""
    return _manager
