"""Typed outcome of one fix: what the plugin did to the running sglang, and why."""

from __future__ import annotations

import enum
from typing import NamedTuple

__all__ = ["FixState", "FixStatus"]


class FixState(str, enum.Enum):
    """What happened to one fix in this process: ``applied`` (its changes are in place);
    ``pending`` (part of it, or its decision, waits for sglang to import a module, and it reports
    its outcome then); ``not needed`` (upstream already behaves correctly; nothing installed);
    ``skipped`` (it does not apply to this sglang or platform); ``disabled`` (a switch turned it
    off: ``SGLANG_AITER_EXT=0`` or ``SGLANG_AITER_EXT_DISABLE``); ``failed`` (probing or
    applying raised; sglang keeps running without it)."""

    APPLIED = "applied"
    PENDING = "pending"
    NOT_NEEDED = "not needed"
    SKIPPED = "skipped"
    DISABLED = "disabled"
    FAILED = "failed"

    __str__ = str.__str__  # the value, as enum.StrEnum (Python 3.11+) does


class FixStatus(NamedTuple):
    """The status one fix reports, with a human-readable reason: immutable, compared and hashed
    by value; ``_replace`` makes a changed copy."""

    name: str
    state: FixState
    detail: str = ""
    waiting_for: tuple[str, ...] = ()
    """``pending`` only: the sglang modules whose import completes the fix."""

    def __str__(self) -> str:
        return f"{self.name}={self.state.value}" + (f" ({self.detail})" if self.detail else "")
