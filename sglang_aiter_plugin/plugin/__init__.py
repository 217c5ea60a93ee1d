"""The plugin's own extension points, built on pluggy.

Fixes (built-in and third-party) are pluggy plugins that implement the hooks in
:mod:`sglang_aiter_plugin.plugin.spec`. Third-party packages contribute theirs through the
entry-point group :data:`FIXES_GROUP`; the entry-point name becomes the fix name::

    [project.entry-points."sglang_aiter_plugin.fixes"]
    my-fix = "my_package.my_fix"

    # my_package/my_fix.py
    from sglang_aiter_plugin.plugin import hookimpl
    from sglang_aiter_plugin import FixState, FixStatus

    @hookimpl
    def aiter_ext_apply_fix(context):
        return FixStatus("my-fix", FixState.APPLIED, "what it did")

A plugin may also be any object with such methods (the built-in collective fixes are). Only
names starting with :data:`HOOK_PREFIX` are hooks (as pytest does for ``pytest_``); a plugin that
implements none is reported ``failed``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pluggy

__all__ = ["FIXES_GROUP", "HOOK_PREFIX", "NAME", "hookimpl"]

NAME = "sglang_aiter_plugin"
FIXES_GROUP = "sglang_aiter_plugin.fixes"
HOOK_PREFIX = "aiter_ext_"  # every hook's name starts with it; other names are never inspected

_F = TypeVar("_F", bound=Callable[..., Any])
hookimpl: Callable[[_F], _F] = pluggy.HookimplMarker(NAME)
