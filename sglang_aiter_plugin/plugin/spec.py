"""Hook specifications: what a fix or an observer of the buffer pool implements.

All hooks run on cold paths only (plugin load, backend construction, CUDA-graph set-up); none is
called per decode step.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import pluggy

from sglang_aiter_plugin.plugin import NAME

if TYPE_CHECKING:
    from packaging.version import Version

    from sglang_aiter_plugin._status import FixStatus

__all__ = ["FixContext", "PoolResize", "aiter_ext_apply_fix", "aiter_ext_pool_resized"]

_F = TypeVar("_F", bound=Callable[..., Any])
_spec_marker = pluggy.HookspecMarker(NAME)


def _spec(func: _F) -> _F:
    return _spec_marker(func)


def _ignore(status: FixStatus) -> None:
    """The default ``report``: a context built without one drops later outcomes."""


# Plain classes: this module loads in every process at start-up, where creating a dataclass or
# NamedTuple class costs more than the rest of the module.


class FixContext:
    """What a fix may look at when it decides whether and how to apply.

    ``plugin_version``; ``sglang_version``: the installed sglang release, or ``None`` when
    sglang's metadata cannot be read; ``report``: report a later outcome (a fix that returned
    ``pending`` calls it once its deferred work has run, ``applied``, or failed, ``failed``; the
    log and ``doctor`` then show it).
    """

    __slots__ = ("plugin_version", "report", "sglang_version")

    def __init__(self, plugin_version: str, sglang_version: Version | None,
                 report: Callable[[FixStatus], None] = _ignore) -> None:
        self.plugin_version = plugin_version
        self.sglang_version = sglang_version
        self.report = report

    def with_report(self, report: Callable[[FixStatus], None]) -> FixContext:
        """The same context reporting to ``report``."""
        return FixContext(self.plugin_version, self.sglang_version, report)

    def __repr__(self) -> str:
        return (f"FixContext(plugin_version={self.plugin_version!r}, "
                f"sglang_version={self.sglang_version!r})")


class PoolResize:
    """A grow-only buffer pool changed capacity (batch rows).

    ``pool``: the :class:`~sglang_aiter_plugin.backend.pool.BufferPool` that grew; ``owner``: the
    backend object that owns it; ``old_capacity``, ``new_capacity``; ``reason``.
    """

    __slots__ = ("new_capacity", "old_capacity", "owner", "pool", "reason")

    def __init__(self, pool: Any, owner: Any, old_capacity: int, new_capacity: int,
                 reason: str) -> None:
        self.pool = pool
        self.owner = owner
        self.old_capacity = old_capacity
        self.new_capacity = new_capacity
        self.reason = reason

    def __repr__(self) -> str:
        return (f"PoolResize({self.old_capacity} -> {self.new_capacity} rows, "
                f"reason={self.reason!r})")


@_spec
def aiter_ext_apply_fix(context: FixContext) -> FixStatus:  # type: ignore[empty-body]
    """Probe whether the fix is needed here and apply it; report what happened.

    Called once per process, from ``register()``. Must be idempotent and cheap: sglang loads
    plugins in the launcher, the engine and every scheduler process. A fix whose work waits for
    sglang to import a module returns ``pending`` and reports its outcome through
    ``context.report`` when that happens. Raising is allowed (the
    manager turns it into a ``failed`` status and carries on with the other fixes), but a fix
    should prefer to return ``skipped``/``not needed`` with a reason.
    """


@_spec
def aiter_ext_pool_resized(event: PoolResize) -> None:
    """A backend's buffer pool grew (before CUDA-graph capture).

    Implementations re-point objects that cache references to the pool's tensors. Never called
    on the per-step path.
    """
