"""A process-wide plugin manager made for one test: the built-in fixes plus given plugins."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from sglang_aiter_plugin.plugin import manager as manager_module
from sglang_aiter_plugin.plugin.manager import FixSource, PluginManager

__all__ = ["install_manager"]


def install_manager(
    monkeypatch: pytest.MonkeyPatch,
    plugins: Iterable[tuple[str, object]] = (),
    *,
    builtin: bool = True,
) -> PluginManager:
    """Make a fresh manager the process-wide one until the test ends; register ``plugins`` in it.

    ``builtin=False`` leaves the built-in fixes out (and so imports none of them).
    """
    sources: list[FixSource] = [] if not builtin else manager_module.fix_sources()[0]
    sources = [s for s in sources if s.entry_point is None]
    manager = PluginManager(sources)
    for name, plugin in plugins:
        manager.pluggy.register(plugin, name=name)
        manager._order.append(name)
    monkeypatch.setattr(manager_module, "_manager", manager)
    return manager
