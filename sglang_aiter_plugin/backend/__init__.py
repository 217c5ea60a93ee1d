"""The ``aiter-ext`` attention backend (built only when a user selects it)."""

from __future__ import annotations

from typing import Any

from sglang_aiter_plugin.backend._availability import AiterUnavailableError, require_aiter

__all__ = ["AiterUnavailableError", "backend_classes", "require_aiter"]


def backend_classes() -> tuple[type[Any], type[Any]]:
    """``(AiterExtAttnBackend, AiterExtMultiStepDraftBackend)``; imports sglang's aiter backend."""
    from sglang_aiter_plugin.backend.classes import (
        AiterExtAttnBackend,
        AiterExtMultiStepDraftBackend,
    )

    return AiterExtAttnBackend, AiterExtMultiStepDraftBackend

