"""The registry of the plugin's fixes, built on pluggy: each fix in
:data:`~sglang_aiter_plugin.fixes.BUILTIN_FIXES` is a pluggy plugin (a module, or an object such
as the collective fixes) implementing the hook in :mod:`.spec` with :data:`hookimpl`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pluggy

__all__ = ["HOOK_PREFIX", "PROJECT", "hookimpl"]

PROJECT = "sglang_aiter_plugin"
HOOK_PREFIX = "aiter_ext_"  # every hook's name starts with it (as pytest's with ``pytest_``)

_F = TypeVar("_F", bound=Callable[..., Any])
hookimpl: Callable[[_F], _F] = pluggy.HookimplMarker(PROJECT)
