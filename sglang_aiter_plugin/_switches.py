"""Environment switches the plugin reads, parsed once, with clear errors for bad values.

* ``SGLANG_AITER_EXT``: ``1`` (default) applies the fixes; ``0`` loads the plugin, changes nothing.
* ``SGLANG_AITER_EXT_DISABLE``: comma-separated fix names to leave out (``capture-reduce-scatter``).
* ``SGLANG_AITER_EXT_BOUNDS_CHECK``: ``0`` (default) or ``1``; ``1`` makes every CUDA-graph
  metadata call of an ``aiter-ext`` backend check its batch size against the captured maximum.

At plugin load a bad value never takes sglang down: it is reported (variable, value, accepted
values) in the plugin's log line and by ``sglang-aiter-plugin doctor``, which exits non-zero. The
``aiter-ext`` backend reads ``SGLANG_AITER_EXT_BOUNDS_CHECK`` again when its CUDA-graph state is set
up, and there a bad value is an error (:class:`SwitchValueError`): the user chose that backend.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

from sglang_aiter_plugin._errors import AiterExtError

__all__ = [
    "BOUNDS_CHECK_VAR",
    "DISABLE_VAR",
    "ENABLE_VAR",
    "SwitchValueError",
    "Switches",
    "bounds_check_requested",
    "read_switches",
]

ENABLE_VAR = "SGLANG_AITER_EXT"
DISABLE_VAR = "SGLANG_AITER_EXT_DISABLE"
BOUNDS_CHECK_VAR = "SGLANG_AITER_EXT_BOUNDS_CHECK"

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class Switches:
    """The parsed switches, plus the problems found while parsing them."""

    __slots__ = ("bounds_check", "disabled_fixes", "enabled", "problems")

    def __init__(self, enabled: bool = True, disabled_fixes: frozenset[str] = frozenset(),
                 bounds_check: bool = False, problems: tuple[str, ...] = ()) -> None:
        self.enabled = enabled
        self.disabled_fixes = disabled_fixes
        self.bounds_check = bounds_check
        self.problems = problems

    def __repr__(self) -> str:
        return (f"Switches(enabled={self.enabled}, disabled_fixes={sorted(self.disabled_fixes)}, "
                f"bounds_check={self.bounds_check}, problems={self.problems})")


class SwitchValueError(AiterExtError, ValueError):
    """An environment switch holds a value outside its accepted values."""


def _parse_flag(var: str, raw: str | None, default: bool) -> bool:
    """``raw`` as a boolean; empty or unset is ``default``; anything else raises."""
    if raw is None or raw.strip() == "":
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    from sglang_aiter_plugin._errors import shorten  # error paths only: not a start-up import

    raise SwitchValueError(
        f"{var}={shorten(raw)} is not valid; accepted values: {', '.join(_TRUE + _FALSE)}"
    )


def bounds_check_requested(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``SGLANG_AITER_EXT_BOUNDS_CHECK`` asks for the batch-size check (strict)."""
    env = os.environ if environ is None else environ
    return _parse_flag(BOUNDS_CHECK_VAR, env.get(BOUNDS_CHECK_VAR), default=False)


def read_switches(
    known_fixes: Iterable[str], environ: Mapping[str, str] | None = None
) -> Switches:
    """Parse the switches from ``environ`` (default: ``os.environ``).

    An invalid ``SGLANG_AITER_EXT`` keeps the default (enabled) and records a problem; unknown
    names in the disable list are ignored and recorded.
    """
    env = os.environ if environ is None else environ
    problems: list[str] = []

    try:
        enabled = _parse_flag(ENABLE_VAR, env.get(ENABLE_VAR), default=True)
    except SwitchValueError as exc:
        enabled = True
        problems.append(f"{exc} (kept the default, 1)")
    try:
        bounds_check = bounds_check_requested(env)
    except SwitchValueError as exc:
        bounds_check = False
        problems.append(f"{exc} (kept the default, 0; an aiter-ext backend will refuse it)")

    known = sorted(set(known_fixes))
    disabled: set[str] = set()
    unknown: list[str] = []
    raw_list = env.get(DISABLE_VAR, "")
    for item in (part.strip() for part in raw_list.split(",")):
        if not item:
            continue
        if item in known:
            disabled.add(item)
        elif item not in unknown:
            unknown.append(item)
    if unknown:  # one problem, however long the list
        from sglang_aiter_plugin._errors import shorten, summarise

        what = f"unknown fix {shorten(unknown[0])}" if len(unknown) == 1 else (
            f"{len(unknown):,} unknown fixes: {summarise(unknown)}")
        problems.append(f"{DISABLE_VAR} names {what}; accepted names: {', '.join(known)}")
    return Switches(
        enabled=enabled,
        disabled_fixes=frozenset(disabled),
        bounds_check=bounds_check,
        problems=tuple(problems),
    )
