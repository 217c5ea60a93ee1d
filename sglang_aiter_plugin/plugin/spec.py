"""Hook specifications: what a fix or an observer of the buffer pool implements.

All hooks run on cold paths only (plugin load, backend construction, CUDA-graph set-up); none is
called per decode step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import pluggy

from sglang_aiter_plugin.plugin import NAME

if TYPE_CHECKING:
    from packaging.version import Version

    from sglang_aiter_plugin._status import FixStatus

__all__ = ["FixContext", "PoolResize", "aiter_ext_apply_fix", "aiter_ext_pool_resized"]

hookspec = pluggy.HookspecMarker(NAME)


class FixContext(NamedTuple):
    """What a fix may look at when it decides whether and how to apply.

    ``sglang_version``: ``None`` when sglang's metadata cannot be read; ``report``: report a
    later outcome (a fix that returned ``pending`` calls it once its deferred work has run; the
    log and ``doctor`` then show it; a context built without one drops them)."""

    plugin_version: str
    sglang_version: Version | None
    report: Callable[[FixStatus], None] = lambda status: None

    def with_report(self, report: Callable[[FixStatus], None]) -> FixContext:
        """The same context reporting to ``report``."""
        return self._replace(report=report)


class PoolResize(NamedTuple):
    """A grow-only buffer pool (:class:`~sglang_aiter_plugin.backend.pool.BufferPool`) of
    ``owner``, a backend object, changed capacity (batch rows)."""

    pool: Any
    owner: Any
    old_capacity: int
    new_capacity: int
    reason: str

    def __repr__(self) -> str:
        return (f"PoolResize({self.old_capacity} -> {self.new_capacity} rows, "
                f"reason={self.reason!r})")


@hookspec
def aiter_ext_apply_fix(context: FixContext) -> FixStatus:  # type: ignore[empty-body]
    """Probe whether the fix is needed here and apply it; report what happened.

    Called once per process, from ``register()``; must be idempotent and cheap (sglang loads
    plugins in the launcher, the engine and every scheduler process). A fix whose work waits for
    sglang to import a module returns ``pending`` and reports its outcome through
    ``context.report``. Raising is allowed (the fix is then ``failed``; the others still run),
    but a fix should prefer to return ``skipped``/``not needed`` with a reason.
    """


@hookspec
def aiter_ext_pool_resized(event: PoolResize) -> None:
    """A backend's buffer pool grew (before CUDA-graph capture).

    Implementations re-point objects that cache references to the pool's tensors. Never called
    on the per-step path.
    """
