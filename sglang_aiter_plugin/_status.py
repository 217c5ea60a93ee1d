"""Typed outcome of one fix: what the plugin did to the running sglang, and why."""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["FixState", "FixStatus"]


class FixState(str, enum.Enum):
    """What happened to one fix in this process."""

    APPLIED = "applied"
    """The fix is installed (or will be when sglang applies its registered hooks)."""
    NOT_NEEDED = "not needed"
    """Upstream already behaves correctly here; nothing was installed."""
    PENDING = "pending"
    """Decided later in this process, when sglang imports the module the fix probes; nothing
    is installed until then, and the decision is logged when it is made."""
    SKIPPED = "skipped"
    """The fix does not apply to this sglang or platform (e.g. the patched method is absent)."""
    DISABLED = "disabled"
    """A switch turned the fix off (``SGLANG_AITER_EXT=0`` or ``SGLANG_AITER_EXT_DISABLE``)."""
    FAILED = "failed"
    """Probing or applying raised; sglang keeps running without this fix."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class FixStatus:
    """The status one fix reports, with a human-readable reason."""

    name: str
    state: FixState
    detail: str = ""

    def as_dict(self) -> dict[str, str]:
        return {"name": self.name, "state": self.state.value, "detail": self.detail}

    def __str__(self) -> str:
        return f"{self.name}={self.state.value}" + (f" ({self.detail})" if self.detail else "")
