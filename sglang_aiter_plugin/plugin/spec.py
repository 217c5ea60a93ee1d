"""The hook specification every fix implements; it runs at plugin load, never per decode step."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, NamedTuple

import pluggy

from sglang_aiter_plugin.plugin import PROJECT

if TYPE_CHECKING:
    from packaging.version import Version

    from sglang_aiter_plugin._status import FixStatus

__all__ = ["FixContext", "aiter_ext_apply_fix"]

hookspec = pluggy.HookspecMarker(PROJECT)


class FixContext(NamedTuple):
    """What a fix may look at when it decides whether and how to apply.

    ``sglang_version``: ``None`` when sglang's metadata cannot be read; ``report``: report a
    later outcome (a fix that returned ``pending`` calls it once its deferred work has run; the
    log and ``doctor`` then show it; a context built without one drops them)."""

    sglang_version: Version | None
    report: Callable[[FixStatus], None] = lambda status: None


@hookspec
def aiter_ext_apply_fix(context: FixContext) -> FixStatus:  # type: ignore[empty-body]
    """Probe whether the fix is needed here and apply it; report what happened.

    Called once per process, from ``register()``; must be idempotent and cheap (sglang loads
    plugins in the launcher, the engine and every scheduler process). A fix whose work waits for
    sglang to import a module returns ``pending`` and reports its outcome through
    ``context.report``. Raising is allowed (the fix is then ``failed``; the others still run),
    but a fix should prefer to return ``skipped``/``not needed`` with a reason.
    """
