"""What a collective fix's wrapper checks during a capture: the capture conditions sglang
ignores (:class:`Plan`), built once the fix has decided (:func:`plan_for`)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from sglang_aiter_plugin.fixes.collectives.capture_scope import own_flag

if TYPE_CHECKING:
    from sglang_aiter_plugin.fixes.collectives.probe import Condition

__all__ = ["Plan", "plan_for"]


class Plan(NamedTuple):
    """The conditions sglang ignores, as a wrapper checks them during a capture: ``copy_in``
    (read at start-up), ``tms`` (sglang's ``envs`` field, read per call), ``comm_flag``,
    ``replay`` (:class:`~.replay.ReplayCheck`: whether the group's ranks may replay different
    graphs, read per call from what sglang is capturing)."""

    copy_in: bool = False
    tms: Any = None
    comm_flag: bool = False
    replay: Callable[[Any, Any], bool] | None = None

    def unregistered(self, communicator: Any, coordinator: Any = None) -> bool:
        """Whether this capture (in ``coordinator``'s group) must not register the caller's
        tensors (the communicator's flag as its own, below a capture scope's view)."""
        if self.copy_in:
            return True
        if self.comm_flag and not own_flag(communicator, "enable_register_for_capturing"):
            return True
        if self.tms is not None and bool(self.tms.get()):
            return True
        return self.replay is not None and self.replay(coordinator, communicator)


def plan_for(ignored: tuple[Condition, ...], envs: Any,
             environ: Mapping[str, str] | None = None,
             replay: Callable[[Any, Any], bool] | None = None) -> Plan:
    """The plan for the conditions sglang ignores; copy-in as sglang reads it (once, ``"1"``);
    ``replay``: the check for :attr:`~.probe.Condition.REPLAY`, where that is ignored."""
    from sglang_aiter_plugin.fixes.collectives.probe import COPY_IN_ENV, TMS_ENV, Condition

    env = os.environ if environ is None else environ
    return Plan(
        copy_in=Condition.COPY_IN in ignored and env.get(COPY_IN_ENV, "0") == "1",
        tms=getattr(envs, TMS_ENV) if Condition.TMS in ignored else None,
        comm_flag=Condition.COMM_FLAG in ignored,
        replay=replay if Condition.REPLAY in ignored else None,
    )
