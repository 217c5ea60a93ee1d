"""The ``aiter-ext`` attention backend (built only when a user selects it)."""

from __future__ import annotations

from typing import Any

from sglang_aiter_plugin.backend._availability import AiterUnavailableError, require_aiter

__all__ = ["AiterUnavailableError", "create_backend"]


def create_backend(runner: Any) -> Any:
    """Build the backend for ``runner``; raise :class:`AiterUnavailableError` off ROCm."""
    require_aiter()
    from sglang.srt.layers.attention.aiter_backend import AiterAttnBackend

    return AiterAttnBackend(runner)
