"""Typed outcome of one fix: what the plugin did to the running sglang, and why."""

from __future__ import annotations

import enum
from typing import Any

__all__ = ["FixState", "FixStatus"]


class FixState(str, enum.Enum):
    """What happened to one fix in this process."""

    APPLIED = "applied"
    """The fix's changes are in place in this process."""
    PENDING = "pending"
    """Part of the fix (or its decision) waits for sglang to import a module; nothing more is
    installed until then, and the fix reports its outcome when that happens."""
    NOT_NEEDED = "not needed"
    """Upstream already behaves correctly here; nothing was installed."""
    SKIPPED = "skipped"
    """The fix does not apply to this sglang or platform (e.g. the patched method is absent)."""
    DISABLED = "disabled"
    """A switch turned the fix off (``SGLANG_AITER_EXT=0`` or ``SGLANG_AITER_EXT_DISABLE``)."""
    FAILED = "failed"
    """Probing or applying raised; sglang keeps running without this fix."""

    def __str__(self) -> str:
        return self.value


class FixStatus:
    """The status one fix reports, with a human-readable reason.

    Immutable, compared and hashed by value; ``_replace`` makes a changed copy. (A plain class,
    not a NamedTuple or dataclass: this module loads in every process at start-up, where
    creating either kind of class costs more than the rest of the module.)
    """

    __slots__ = ("detail", "name", "state", "waiting_for")

    name: str
    state: FixState
    detail: str
    waiting_for: tuple[str, ...]
    """``pending`` only: the sglang modules whose import completes the fix."""

    def __init__(self, name: str, state: FixState, detail: str = "",
                 waiting_for: tuple[str, ...] = ()) -> None:
        init = object.__setattr__
        init(self, "name", name)
        init(self, "state", state)
        init(self, "detail", detail)
        init(self, "waiting_for", tuple(waiting_for))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError(f"FixStatus is immutable; use _replace({name}=...) for a copy")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("FixStatus is immutable")

    def _replace(self, **changes: Any) -> FixStatus:
        """A copy with the given fields changed (as a NamedTuple's ``_replace``)."""
        fields: dict[str, Any] = {"name": self.name, "state": self.state,
                                  "detail": self.detail, "waiting_for": self.waiting_for}
        unknown = sorted(set(changes) - set(fields))
        if unknown:
            raise TypeError(f"FixStatus has no field {', '.join(unknown)}; fields: "
                            f"{', '.join(fields)}")
        fields.update(changes)
        return FixStatus(**fields)

    def __reduce__(self) -> tuple[type[FixStatus], tuple[str, FixState, str, tuple[str, ...]]]:
        return (FixStatus, self._key())  # pickle and copy: rebuilt through __init__

    def _key(self) -> tuple[str, FixState, str, tuple[str, ...]]:
        return (self.name, self.state, self.detail, self.waiting_for)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FixStatus):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        return (f"FixStatus(name={self.name!r}, state={self.state!r}, detail={self.detail!r}, "
                f"waiting_for={self.waiting_for!r})")

    def as_dict(self) -> dict[str, object]:
        data: dict[str, object] = {"name": self.name, "state": self.state.value,
                                   "detail": self.detail}
        if self.waiting_for:
            data["waiting_for"] = list(self.waiting_for)
        return data

    def __str__(self) -> str:
        return f"{self.name}={self.state.value}" + (f" ({self.detail})" if self.detail else "")
