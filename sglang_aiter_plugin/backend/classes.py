"""The plugin's backend classes (imported only when a user selected ``aiter-ext``)."""

from __future__ import annotations

from sglang_aiter_plugin.backend.attn import AiterExtAttnBackend
from sglang_aiter_plugin.backend.draft import AiterExtMultiStepDraftBackend

__all__ = ["AiterExtAttnBackend", "AiterExtMultiStepDraftBackend"]
