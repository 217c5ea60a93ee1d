"""A plugin manager made for one test: the built-in fixes plus given in-process plugins."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from sglang_aiter_plugin.fixes import BUILTIN_FIXES
from sglang_aiter_plugin.plugin import manager as manager_module
from sglang_aiter_plugin.plugin.manager import FixSource, PluginManager

__all__ = ["use_manager"]


def use_manager(
    monkeypatch: pytest.MonkeyPatch,
    plugins: Iterable[tuple[str, object]] = (),
    *,
    builtin: bool = True,
) -> PluginManager:
    """The process-wide manager, for this test only: built-in fixes (unless ``builtin=False``,
    which imports none of them) and ``plugins`` registered in-process."""
    sources = [FixSource.builtin(n, v) for n, v in BUILTIN_FIXES] if builtin else []
    sources += [FixSource.in_process(name, plugin) for name, plugin in plugins]
    manager = PluginManager(sources)
    monkeypatch.setattr(manager_module, "current_manager", lambda: manager)
    return manager
