"""Built-in fixes, each a pluggy plugin module with a ledger: Why / How / Upstream / Remove when.

This package's ``__init__`` stays import-free so that the names below can be read without pluggy.
"""

from __future__ import annotations

from sglang_aiter_plugin.fixes.collectives import FIXES as _COLLECTIVES

__all__ = ["BUILTIN_FIXES"]

#: Built-in fixes: (fix name, module). Order is the order they are applied and reported.
BUILTIN_FIXES: tuple[tuple[str, str], ...] = (
    ("attention-backend", "sglang_aiter_plugin.attention_backend.fix"),
    *_COLLECTIVES,
)
