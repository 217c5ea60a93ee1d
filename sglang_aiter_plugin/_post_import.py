"""Run a callback right after a module is imported, or now if it already is.

The plugin changes sglang's module-level lists (the CLI choices, the backend registry) before
sglang uses them, without importing those modules at plugin load. The hook leaves nothing behind:
its finder sits in ``sys.meta_path`` only while a callback is pending, and a module it saw loading
gets its own loader back on ``__spec__`` / ``__loader__`` once its callbacks ran.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import logging
import sys
import threading
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from sglang_aiter_plugin._log import log

__all__ = ["cancel", "when_imported"]

_Callback = Callable[[ModuleType], None]
_pending: dict[str, list[_Callback]] = {}
_lock = threading.RLock()


def when_imported(module_name: str, callback: _Callback) -> bool:
    """Call ``callback(module)`` after ``module_name`` is imported, or now if it already is;
    return whether it ran now. A deferred callback's exceptions are logged, never raised."""
    with _lock:
        module = sys.modules.get(module_name)
        if module is None:
            waiting = _pending.setdefault(module_name, [])
            if callback not in waiting:
                waiting.append(callback)
            if not any(isinstance(f, _Finder) for f in sys.meta_path):
                sys.meta_path.insert(0, _Finder())
            return False
    callback(module)
    return True


def cancel(module_name: str, callback: _Callback) -> None:
    """Forget ``callback`` for ``module_name``; the hook leaves when nothing else waits."""
    with _lock:
        callbacks = _pending.get(module_name, [])
        if callback in callbacks:
            callbacks.remove(callback)
        if not callbacks:
            _pending.pop(module_name, None)
        _leave_if_idle()


def _leave_if_idle() -> None:
    if not _pending:
        sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Finder)]


def _run_pending(module_name: str) -> None:
    with _lock:
        callbacks = _pending.pop(module_name, [])
        _leave_if_idle()
    module = sys.modules.get(module_name)
    if module is None:
        return
    for callback in callbacks:
        try:
            callback(module)
        except Exception:
            log(logging.ERROR, "sglang-aiter-plugin: post-import step for %s failed", module_name,
                exc_info=True)


class _Loader(importlib.abc.Loader):
    def __init__(self, wrapped: importlib.abc.Loader, name: str) -> None:
        self._wrapped, self._name = wrapped, name

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._wrapped.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        spec = module.__spec__
        try:
            self._wrapped.exec_module(module)
        finally:  # the module keeps its own loader, not this wrapper
            if spec is not None and spec.loader is self:
                spec.loader = self._wrapped
            if getattr(module, "__loader__", None) is self:
                module.__loader__ = self._wrapped
        _run_pending(self._name)

    def __getattr__(self, item: str) -> Any:  # get_source, is_package, ... for tools
        return getattr(self._wrapped, item)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        with _lock:
            if fullname not in _pending:
                return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader, fullname)
                return spec
        return None
