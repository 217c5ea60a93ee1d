"""The plugin manager: built-in fixes, then third-party fixes from entry points.

Built as pluggy's and tox's authors use pluggy: a fix switched off by the user is *blocked*
(``set_blocked``) and its module never imported; two fixes claiming one name are both reported
(the second is not loaded), never silently dropped; a third-party fix that fails to load is a
``failed`` status, and the others still apply. Callers use :func:`get_manager` and its typed
methods; :attr:`PluginManager.pluggy` is there for embedders that need pluggy itself.
``register()`` builds the process-wide manager once, with the user's switches
(:func:`install_manager`); nothing else creates one.
"""

from __future__ import annotations

import importlib
import logging
import os
import pathlib
import threading
from collections.abc import Collection, Sequence
from importlib.metadata import Distribution, EntryPoint, PathDistribution, distributions
from typing import Any

import pluggy

from sglang_aiter_plugin._status import FixState, FixStatus
from sglang_aiter_plugin._switches import DISABLE_VAR
from sglang_aiter_plugin.fixes import BUILTIN_FIXES
from sglang_aiter_plugin.plugin import FIXES_GROUP, HOOK_PREFIX, NAME, spec
from sglang_aiter_plugin.plugin.spec import FixContext, PoolResize

__all__ = ["FixSource", "PluginManager", "current_manager", "fix_sources", "install_manager"]

logger = logging.getLogger(__name__)
_HOOKS = tuple(name for name in spec.__all__ if name.startswith(HOOK_PREFIX))


class FixSource:
    """Where a fix comes from: a built-in module, a third-party entry point (not loaded yet), or
    a plugin object an embedder hands over in-process."""

    __slots__ = ("entry_point", "module", "name", "plugin")

    def __init__(self, name: str, module: str | None = None,
                 entry_point: EntryPoint | None = None, plugin: object | None = None) -> None:
        self.name = name
        self.module = module
        self.entry_point = entry_point
        self.plugin = plugin

    def __repr__(self) -> str:
        return f"FixSource({self.name!r}, {self.origin})"

    @property
    def origin(self) -> str:
        if self.plugin is not None:
            return f"in-process plugin {type(self.plugin).__name__}"
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
    for ep in _entry_points(FIXES_GROUP):
        source = FixSource(ep.name, entry_point=ep)
        first = taken.get(ep.name)
        if first is not None:  # reported under its own label; the first fix keeps the name
            problems.append(FixStatus(
                f"{ep.name} (duplicate)", FixState.FAILED,
                f"{source.origin} is not loaded: the fix name {ep.name!r} is already taken by "
                f"{first.origin}; rename one of the entry points (group {FIXES_GROUP})",
            ))
            continue
        taken[ep.name] = source
        sources.append(source)
    return sources, problems


def _entry_points(group: str) -> list[EntryPoint]:
    """``importlib.metadata.entry_points(group=group)``, reading only what can match.

    The standard call parses every installed distribution's name and entry points; here each
    ``entry_points.txt`` is read once, as bytes, and parsed only when it names ``group`` (a few
    hundred distributions in sglang's environment, none or one of them with this group).
    """
    header = f"[{group}]".encode()
    found: list[EntryPoint] = []
    seen: set[str] = set()
    for dist in distributions():
        if header not in _entry_points_bytes(dist):
            continue
        name = (dist.metadata["Name"] or "").lower().replace("_", "-")
        if name in seen:  # the first on sys.path wins, as importlib.metadata decides
            continue
        seen.add(name)
        found.extend(ep for ep in dist.entry_points if ep.group == group)
    return found


def _entry_points_bytes(dist: Distribution) -> bytes:
    """A distribution's ``entry_points.txt``, or ``b""``.

    A folder on disk (a ``PathDistribution`` over a ``pathlib`` path, nearly every one) is read
    with ``os.open`` and ``os.read``, a fifth of the cost of ``read_text`` over ``pathlib`` (most
    distributions have no such file); any other kind goes through ``read_text``.
    """
    folder = getattr(dist, "_path", None)
    if type(dist) is not PathDistribution or not isinstance(folder, pathlib.PurePath):
        return (dist.read_text("entry_points.txt") or "").encode()
    try:
        fd = os.open(f"{folder}{os.sep}entry_points.txt", os.O_RDONLY)
    except OSError:  # no such file, or unreadable: as read_text, no entry points
        return b""
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError:
        return b""
    finally:
        os.close(fd)


class _PluggyManager(pluggy.PluginManager):
    """pluggy's manager, looking only at names that can be hooks, as pytest's does.

    Every hook of this project is named ``aiter_ext_*`` (:data:`HOOK_PREFIX`); a fix module holds
    a few dozen other names (its imports), which pluggy would otherwise inspect one by one at
    every start-up. A plugin left with no hook at all is reported by :class:`PluginManager`.
    """

    def parse_hookimpl_opts(self, plugin: Any, name: str) -> Any:
        if not name.startswith(HOOK_PREFIX):
            return None
        return super().parse_hookimpl_opts(plugin, name)


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
        self.pluggy: pluggy.PluginManager = _PluggyManager(NAME)
        self.pluggy.add_hookspecs(spec)
        self._order = [s.name for s in sources]
        self._problems: list[FixStatus] = list(problems)
        self._unloaded: set[str] = set()
        for source in sources:
            if source.name in blocked:
                self.pluggy.set_blocked(source.name)
                continue
            try:
                plugin: Any = source.plugin
                if plugin is None:
                    plugin = (source.entry_point.load() if source.entry_point is not None
                              else importlib.import_module(str(source.module)))
                self.pluggy.register(plugin, name=source.name)
                if not self.pluggy.get_hookcallers(plugin):
                    self.pluggy.unregister(plugin)
                    raise LookupError(
                        f"it implements no hook; name its functions after "
                        f"{' or '.join(_HOOKS)} and mark them with @hookimpl"
                    )
            except Exception as exc:  # a broken third-party fix must not stop the others
                self._unloaded.add(source.name)
                self._problems.append(FixStatus(
                    source.name, FixState.FAILED,
                    f"cannot load {source.origin}: {type(exc).__name__}: {exc}",
                ))
        try:
            self.pluggy.check_pending()
        except pluggy.PluginValidationError as exc:
            name = self.pluggy.get_name(exc.plugin) or repr(exc.plugin)
            self.pluggy.unregister(exc.plugin)
            self._unloaded.add(name)
            self._problems.append(FixStatus(name, FixState.FAILED, str(exc)))

    def fix_names(self) -> list[str]:
        """Every fix name on offer, applied or not, in application order."""
        return list(self._order)

    def apply_fixes(self, context: FixContext) -> list[FixStatus]:
        """Run every registered fix once, each isolated from the others' failures."""
        impls = {i.plugin_name: i for i in self.pluggy.hook.aiter_ext_apply_fix.get_hookimpls()}
        statuses: list[FixStatus] = list(self._problems)
        for name in self._order:
            if name in self._unloaded:
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
    context = context.with_report(_reporting_as(name, context.report))
    try:
        result = function(context=context)
    except Exception as exc:
        logger.debug("fix %s raised", name, exc_info=True)
        return FixStatus(name, FixState.FAILED, f"{type(exc).__name__}: {exc}")
    if not isinstance(result, FixStatus):
        return FixStatus(name, FixState.FAILED, f"returned {result!r}, not a FixStatus")
    return result._replace(name=name) if result.name != name else result


def _reporting_as(name: str, report: Any) -> Any:
    """``report`` for one fix: whatever name a later status carries, it is this fix's."""

    def report_as(status: FixStatus) -> None:
        report(status._replace(name=name) if status.name != name else status)

    return report_as


_lock = threading.RLock()
_manager: PluginManager | None = None


def install_manager(manager: PluginManager) -> PluginManager:
    """Make ``manager`` the process-wide one (``register()`` does, once, with the switches)."""
    global _manager
    with _lock:
        _manager = manager
        return manager


def current_manager() -> PluginManager | None:
    """The process-wide manager, or ``None`` before ``register()`` made one."""
    return _manager
