"""Built-in fixes, each a pluggy plugin with a ledger (Why / How / Upstream PR / Remove when).

This ``__init__`` imports nothing, so the fix names can be read without pluggy or sglang.
"""

from __future__ import annotations

__all__ = ["BUILTIN_FIXES"]

#: (fix name, the plugin: ``module`` or ``module:object``), in the order the fixes are applied
#: and reported; the plugin manager imports each one it does not block.
BUILTIN_FIXES: tuple[tuple[str, str], ...] = (
    ("attention-backend", "sglang_aiter_plugin.fixes.attention_backend.fix"),
    ("capture-all-reduce", "sglang_aiter_plugin.fixes.collectives:ALL_REDUCE"),
    ("capture-all-gather", "sglang_aiter_plugin.fixes.collectives:ALL_GATHER"),
    ("capture-reduce-scatter", "sglang_aiter_plugin.fixes.collectives:REDUCE_SCATTER"),
    ("capture-fused-ar-rmsnorm", "sglang_aiter_plugin.fixes.collectives:FUSED_AR_RMSNORM"),
)
