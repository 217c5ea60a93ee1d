"""The plugin's environment switches (``SGLANG_AITER_EXT``, ``SGLANG_AITER_EXT_DISABLE``,
``SGLANG_AITER_EXT_BOUNDS_CHECK``; the README lists their values), parsed once.

At plugin load a bad value is reported (variable, value, accepted values), never raised. The
``aiter-ext`` backend reads ``SGLANG_AITER_EXT_BOUNDS_CHECK`` again at graph set-up, and there a
bad value raises :class:`SwitchValueError`: the user chose that backend.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from sglang_aiter_plugin._errors import AiterExtError, shorten, summarise

__all__ = ["BOUNDS_CHECK_VAR", "DISABLE_VAR", "ENABLE_VAR", "SwitchValueError", "Switches",
           "bounds_check_requested", "read_switches"]

ENABLE_VAR = "SGLANG_AITER_EXT"
DISABLE_VAR = "SGLANG_AITER_EXT_DISABLE"
BOUNDS_CHECK_VAR = "SGLANG_AITER_EXT_BOUNDS_CHECK"

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")

class Switches(NamedTuple):
    """The parsed switches, plus the problems found while parsing them and the notes on retired
    fix names (accepted, with nothing to disable)."""

    enabled: bool = True
    disabled_fixes: frozenset[str] = frozenset()
    bounds_check: bool = False
    problems: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()


class SwitchValueError(AiterExtError, ValueError):
    """An environment switch holds a value outside its accepted values."""


def _parse_flag(var: str, raw: str, default: bool) -> bool:
    """``raw`` as a boolean; empty (or unset) is ``default``; anything else raises."""
    value = raw.strip().lower()
    if not value:
        return default
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SwitchValueError(
        f"{var}={shorten(raw)} is not valid; accepted values: {', '.join(_TRUE + _FALSE)}"
    )


def bounds_check_requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``SGLANG_AITER_EXT_BOUNDS_CHECK`` asks for the batch-size check (strict)."""
    env = os.environ if environ is None else environ
    return _parse_flag(BOUNDS_CHECK_VAR, env.get(BOUNDS_CHECK_VAR, ""), default=False)


def read_switches(known_fixes: Iterable[str], environ: Mapping[str, str] | None = None,
                  retired: Mapping[str, str] | None = None) -> Switches:
    """Parse the switches from ``environ`` (default: ``os.environ``): a bad value keeps the
    default and an unknown fix name is ignored, each recorded as a problem; a retired fix name
    (``retired``: name -> why nothing replaces it) is accepted, with a note."""
    env = os.environ if environ is None else environ
    retired = retired or {}
    problems: list[str] = []

    try:
        enabled = _parse_flag(ENABLE_VAR, env.get(ENABLE_VAR, ""), default=True)
    except SwitchValueError as exc:
        enabled = True
        problems.append(f"{exc} (kept the default, 1)")
    try:
        bounds_check = bounds_check_requested(env)
    except SwitchValueError as exc:
        bounds_check = False
        problems.append(f"{exc} (kept the default, 0; an aiter-ext backend will refuse it)")

    known = sorted(set(known_fixes))
    listed = list(dict.fromkeys(item for part in env.get(DISABLE_VAR, "").split(",")
                                if (item := part.strip())))
    notes = tuple(f"{name} (in {DISABLE_VAR}) is no longer a fix: {retired[name]}, so "
                  "there is nothing to disable" for name in listed
                  if name in retired and name not in known)
    unknown = [item for item in listed if item not in known and item not in retired]
    if unknown:  # one problem, however long the list
        what = f"unknown fix {shorten(unknown[0])}" if len(unknown) == 1 else (
            f"{len(unknown):,} unknown fixes: {summarise(unknown)}")
        problems.append(f"{DISABLE_VAR} names {what}; accepted names: {', '.join(known)}")
    disabled = frozenset(item for item in listed if item in known)
    return Switches(enabled, disabled, bounds_check, tuple(problems), notes)
