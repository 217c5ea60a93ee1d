"""Environment switches the plugin reads, parsed once, with clear errors for bad values.

* ``SGLANG_AITER_EXT``: ``1`` (default) applies the fixes; ``0`` loads the plugin, changes nothing.
* ``SGLANG_AITER_EXT_DISABLE``: comma-separated fix names to leave out (``reduce-scatter-tms``).

A bad value never takes sglang down: it is reported (variable, value, accepted values) in the
plugin's log line and by ``sglang-aiter-plugin doctor``, which exits non-zero.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["DISABLE_VAR", "ENABLE_VAR", "Switches", "read_switches"]

ENABLE_VAR = "SGLANG_AITER_EXT"
DISABLE_VAR = "SGLANG_AITER_EXT_DISABLE"

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True)
class Switches:
    """The parsed switches, plus the problems found while parsing them."""

    enabled: bool = True
    disabled_fixes: frozenset[str] = frozenset()
    problems: tuple[str, ...] = field(default=())


def read_switches(
    known_fixes: Iterable[str], environ: Mapping[str, str] | None = None
) -> Switches:
    """Parse the switches from ``environ`` (default: ``os.environ``).

    An invalid ``SGLANG_AITER_EXT`` keeps the default (enabled) and records a problem; unknown
    names in the disable list are ignored and recorded.
    """
    env = os.environ if environ is None else environ
    problems: list[str] = []

    enabled = True
    raw = env.get(ENABLE_VAR)
    if raw is not None and raw.strip() != "":
        value = raw.strip().lower()
        if value in _FALSE:
            enabled = False
        elif value not in _TRUE:
            problems.append(
                f"{ENABLE_VAR}={raw!r} is not valid; accepted values: "
                f"{', '.join(_TRUE + _FALSE)} (kept the default, 1)"
            )

    known = sorted(set(known_fixes))
    disabled: set[str] = set()
    raw_list = env.get(DISABLE_VAR, "")
    for item in (part.strip() for part in raw_list.split(",")):
        if not item:
            continue
        if item in known:
            disabled.add(item)
        else:
            problems.append(
                f"{DISABLE_VAR} names unknown fix {item!r}; accepted names: {', '.join(known)}"
            )
    return Switches(enabled=enabled, disabled_fixes=frozenset(disabled), problems=tuple(problems))
