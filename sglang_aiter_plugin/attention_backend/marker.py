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
from typing import Any

from sglang_aiter_plugin._text import shorten

__all__ = [
    "EXT_NAME",
    "MARKER_ATTR",
    "SELECTED_ENV",
    "STOCK_NAME",
    "SelectionError",
    "is_selected",
    "record",
]

EXT_NAME = "aiter-ext"
STOCK_NAME = "aiter"
MARKER_ATTR = "_aiter_ext_impl"
SELECTED_ENV = "SGLANG_AITER_EXT_SELECTED"


class SelectionError(ValueError):
    """The recorded choice of backend class cannot be read."""


_written = False
"""Whether this process wrote :data:`SELECTED_ENV` (an inherited value is the parent's)."""


def record(server_args: Any, selected: bool) -> None:
    """Record the choice of ``aiter-ext`` on ``server_args`` and in the environment.

    Without the choice nothing is written, and a value this process wrote earlier is removed.
    """
    global _written
    if selected:
        setattr(server_args, MARKER_ATTR, EXT_NAME)
        os.environ[SELECTED_ENV] = "1"
        _written = True
    elif _written:
        os.environ.pop(SELECTED_ENV, None)
        _written = False


def is_selected(server_args: Any | None) -> bool:
    """Whether the plugin's classes should stand in for sglang's ``aiter`` classes."""
    if server_args is not None:
        value = getattr(server_args, MARKER_ATTR, None)
        if value is not None:
            return bool(value == EXT_NAME)
    value = os.environ.get(SELECTED_ENV, "0")
    if value not in ("0", "1"):
        raise SelectionError(
            f"{SELECTED_ENV}={shorten(value)} is not valid; accepted values: 0, 1. The plugin "
            "writes it when it resolves the launch arguments (it is not a switch): unset it, and "
            "choose the backend with --attention-backend aiter or aiter-ext."
        )
    return value == "1"
