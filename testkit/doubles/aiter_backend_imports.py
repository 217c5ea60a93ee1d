"""Names sglang's ``aiter_backend`` binds only when ``import aiter`` succeeds.

The module imports them inside its ``try: import aiter ...`` block, so on a machine without ROCm
they are undefined and the metadata code fails on the first call. ``reset_verify_attn_plan_cache``
(sglang's own, from its unified-attention verify kernels, 0.5.20+) clears a per-step plan cache;
the metadata paths exercised here never fill it, so doing nothing is faithful.
"""

from __future__ import annotations

from typing import Any

__all__ = ["install"]


def _reset_verify_attn_plan_cache() -> None:
    return None


def install(module: Any) -> None:
    """Bind the missing names on sglang's ``aiter_backend`` module (only those it lacks)."""
    if not hasattr(module, "reset_verify_attn_plan_cache"):
        module.reset_verify_attn_plan_cache = _reset_verify_attn_plan_cache
