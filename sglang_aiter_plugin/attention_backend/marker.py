"""Where the choice of ``aiter-ext`` is kept once the name itself has been folded to ``aiter``.

After the fold every field sglang reads says ``aiter``, so the choice of class travels beside
the configuration, in two places, and only when ``aiter-ext`` was chosen:

* the attribute :data:`MARKER_ATTR` on the ``ServerArgs`` record. Schedulers and draft workers
  receive the launcher's record by pickle, and pickling keeps instance attributes (0.5.20+
  ``ServerArgs.__reduce__`` carries the bookkeeping; earlier releases pickle ``__dict__``).
  It is per record, so two engines in one process do not interfere.
* the environment variable :data:`SELECTED_ENV` (``1``), inherited by ``spawn`` children. It is
  the fallback for code paths that rebuild a record from plain field values and so drop the
  attribute.

A launch that does not choose ``aiter-ext`` gets neither: its record is untouched, and the
variable is removed again if an earlier resolution in the same process wrote it. The record wins
when it carries the attribute; the environment decides otherwise.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from sglang_aiter_plugin._errors import AiterExtError

__all__ = [
    "EXT_NAME",
    "MARKER_ATTR",
    "SELECTED_ENV",
    "STOCK_NAME",
    "SelectionError",
    "is_selected",
    "on_record",
    "record",
]

EXT_NAME = "aiter-ext"
STOCK_NAME = "aiter"
MARKER_ATTR = "_aiter_ext_impl"
SELECTED_ENV = "SGLANG_AITER_EXT_SELECTED"


class SelectionError(AiterExtError, ValueError):
    """The recorded choice of backend class cannot be read."""


_listeners: list[Callable[[bool], None]] = []


def on_record(listener: Callable[[bool], None]) -> None:
    """Call ``listener(selected)`` after every recorded choice (the fix arms its steps by it)."""
    if listener not in _listeners:
        _listeners.append(listener)


def record(server_args: Any, selected: bool) -> None:
    """Record the choice of ``aiter-ext`` on ``server_args`` and in the environment.

    Without the choice nothing is written on the record, and a value of :data:`SELECTED_ENV`
    left by an earlier launch (in this process, or inherited from its parent) is removed, so
    that it cannot turn this launch's ``aiter`` into ``aiter-ext``.
    """
    if selected:
        setattr(server_args, MARKER_ATTR, EXT_NAME)
        os.environ[SELECTED_ENV] = "1"
    else:
        os.environ.pop(SELECTED_ENV, None)
    for listener in list(_listeners):
        listener(selected)


def is_selected(server_args: Any | None) -> bool:
    """Whether the plugin's classes should stand in for sglang's ``aiter`` classes."""
    if server_args is not None:
        value = getattr(server_args, MARKER_ATTR, None)
        if value is not None:
            return bool(value == EXT_NAME)
    value = os.environ.get(SELECTED_ENV, "0")
    if value not in ("0", "1"):
        from sglang_aiter_plugin._errors import shorten  # error path only: not a start-up import

        raise SelectionError(
            f"{SELECTED_ENV}={shorten(value)} is not valid; accepted values: 0, 1. The plugin "
            "writes it when it resolves the launch arguments (it is not a switch): unset it, and "
            "choose the backend with --attention-backend aiter or aiter-ext."
        )
    return value == "1"
