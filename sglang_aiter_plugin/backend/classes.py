"""The plugin's backend classes (imported only when a user selected ``aiter-ext``)."""

from __future__ import annotations

from sglang.srt.layers.attention.aiter_backend import (
    AiterAttnBackend,
    AiterMultiStepDraftBackend,
)

__all__ = ["AiterExtAttnBackend", "AiterExtMultiStepDraftBackend"]


class AiterExtAttnBackend(AiterAttnBackend):  # type: ignore[misc]
    """sglang's AITER backend; the buffer pool lands here."""


class AiterExtMultiStepDraftBackend(AiterMultiStepDraftBackend):  # type: ignore[misc]
    """sglang's AITER multi-step draft backend; the buffer pool lands here."""
