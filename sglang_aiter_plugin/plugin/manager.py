"""One plugin manager per process: built-in fixes, then third-party fixes from entry points.

Callers use :func:`get_manager` and its typed methods; nobody else touches ``pm.hook``.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Iterable, Sequence
from importlib.metadata import entry_points
from types import ModuleType
from typing import Any

import pluggy

from sglang_aiter_plugin._status import FixState, FixStatus
from sglang_aiter_plugin._switches import DISABLE_VAR, ENABLE_VAR, Switches
from sglang_aiter_plugin.fixes import BUILTIN_FIXES
from sglang_aiter_plugin.plugin import FIXES_GROUP, NAME, spec
from sglang_aiter_plugin.plugin.spec import FixContext, PoolResize

__all__ = ["BUILTIN_FIXES", "BUILTIN_OBSERVERS", "PluginManager", "get_manager", "reset_manager"]

logger = logging.getLogger(__name__)

#: Built-in fixes: (fix name, module). Order is the order they are applied and reported.

#: Built-in observers: (name, module). They implement hooks other than ``aiter_ext_apply_fix``
#: and are registered before any third-party plugin.
BUILTIN_OBSERVERS: tuple[tuple[str, str], ...] = (
    ("aiter-ext-pool-repoint", "sglang_aiter_plugin.backend.repoint"),
)


class PluginManager:
    """Typed facade over a :class:`pluggy.PluginManager` for this project's hooks."""

    def __init__(self, *, load_entrypoints: bool = True) -> None:
        self._pm = pluggy.PluginManager(NAME)
        self._pm.add_hookspecs(spec)
        self._load_errors: list[FixStatus] = []
        for name, module in (*BUILTIN_FIXES, *BUILTIN_OBSERVERS):
            self._register(name, importlib.import_module(module))
        if load_entrypoints:
            self._load_entrypoints()
        try:
            self._pm.check_pending()
        except pluggy.PluginValidationError as exc:
            self._load_errors.append(FixStatus(str(exc.plugin), FixState.FAILED, str(exc)))

    def _register(self, name: str, plugin: ModuleType | object) -> None:
        if self._pm.has_plugin(name) or self._pm.is_registered(plugin):
            return
        self._pm.register(plugin, name=name)

    def _load_entrypoints(self) -> None:
        for ep in entry_points(group=FIXES_GROUP):
            if self._pm.has_plugin(ep.name):
                continue
            try:
                self._register(ep.name, ep.load())
            except Exception as exc:  # a broken third-party fix must not stop the others
                self._load_errors.append(
                    FixStatus(ep.name, FixState.FAILED, f"cannot load {ep.value}: {exc!r}")
                )

    def register_fix(self, name: str, plugin: object) -> None:
        """Register an extra fix or observer in-process (mainly for tests and embedders)."""
        self._register(name, plugin)

    def unregister(self, name: str) -> None:
        plugin = self._pm.get_plugin(name)
        if plugin is not None:
            self._pm.unregister(plugin)

    def fix_names(self) -> list[str]:
        """Names of every registered plugin that implements ``aiter_ext_apply_fix``."""
        names = []
        for impl in reversed(self._pm.hook.aiter_ext_apply_fix.get_hookimpls()):
            names.append(impl.plugin_name)
        known = [n for n, _ in BUILTIN_FIXES]
        return [n for n in known if n in names] + [n for n in names if n not in known]

    def apply_fixes(self, context: FixContext, switches: Switches) -> list[FixStatus]:
        """Run every fix once, each isolated from the others' failures."""
        impls = {i.plugin_name: i for i in self._pm.hook.aiter_ext_apply_fix.get_hookimpls()}
        statuses: list[FixStatus] = list(self._load_errors)
        for name in self.fix_names():
            if not switches.enabled:
                statuses.append(FixStatus(name, FixState.DISABLED, f"{ENABLE_VAR}=0"))
                continue
            if name in switches.disabled_fixes:
                statuses.append(FixStatus(name, FixState.DISABLED, f"listed in {DISABLE_VAR}"))
                continue
            statuses.append(_call_fix(name, impls[name].function, context))
        return statuses

    def announce_resize(self, event: PoolResize) -> None:
        """Tell every observer that a pool grew (cold path: CUDA-graph set-up)."""
        self._pm.hook.aiter_ext_pool_resized(event=event)

    def plugin_names(self) -> Sequence[str]:
        return [name for name, _ in self._pm.list_name_plugin()]


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


def get_manager() -> PluginManager:
    """The process-wide manager, created on first use."""
    global _manager
    with _lock:
        if _manager is None:
            _manager = PluginManager()
        return _manager


def reset_manager(plugins: Iterable[tuple[str, object]] = ()) -> PluginManager:
    """Replace the process-wide manager (tests only)."""
    global _manager
    with _lock:
        _manager = PluginManager()
        for name, plugin in plugins:
            _manager.register_fix(name, plugin)
        return _manager
