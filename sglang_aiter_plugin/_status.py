"""Typed outcome of one fix, or of graph set-up on one upstream defect: what the plugin did to
the running sglang, and why; and the one route every status takes to the log and to ``doctor``
(:func:`report`, which keeps this process's statuses: :func:`current`)."""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Iterable
from typing import NamedTuple

from sglang_aiter_plugin._log import log

__all__ = ["FixState", "FixStatus", "begin", "current", "report"]


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


_lock = threading.RLock()
_board: dict[str, FixStatus] | None = None  # this process's statuses by name, once fixes ran


def begin(statuses: Iterable[FixStatus]) -> list[FixStatus]:
    """The statuses the fixes returned at plugin load (the start-up line logs them): the board's
    first content, in order; a name reported twice keeps its first status."""
    global _board
    with _lock:
        _board = {}
        for status in statuses:
            _board.setdefault(status.name, status)
        return list(_board.values())


def report(*statuses: FixStatus, where: str = "", always: bool = True) -> None:
    """The one route of a status after plugin load (a fix's later outcome, graph set-up's per
    defect): each replaces its name's status on the board (once fixes ran), and the final ones
    are logged in one line, after ``where`` (``always``: as :func:`~._log.log` says)."""
    with _lock:
        if _board is not None:
            _board.update((status.name, status) for status in statuses)
    final = [s for s in statuses if s.state is not FixState.PENDING]
    if not final:
        return
    level = logging.WARNING if any(s.state is FixState.FAILED for s in final) else logging.INFO
    log(level, "sglang-aiter-plugin: %s%s", f"{where}: " if where else "",
        "; ".join(map(str, final)), always=always)


def current() -> list[FixStatus] | None:
    """This process's statuses as of now (a ``pending`` fix's outcome replaces it; graph
    set-up's follow the fixes), or ``None`` if no fix ran here."""
    with _lock:
        return None if _board is None else list(_board.values())
