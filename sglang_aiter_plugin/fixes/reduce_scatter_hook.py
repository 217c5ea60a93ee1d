"""The AROUND hook on ``GroupCoordinator._maybe_aiter_reduce_scatter`` and what it reads.

sglang's method stays in charge of every branch (gates, warm-up zeroing, piecewise graphs,
eager calls). When the communicator is in capture mode and a switch that sglang ignores says
registration is unsafe, the hook hands the method a view of the coordinator whose communicator
passes ``registered=False`` to ``reduce_scatter``; in the only branch where sglang asks for
``registered=True`` (stream capture) that is the whole change, elsewhere sglang already passes
``False``.

Read once (at registration): which switches the installed sglang ignores (the probe), and
``SGLANG_AITER_CAPTURE_COPY_IN``, which sglang itself reads once, at import of
``parallel_state``. Read per capture call: ``SGLANG_MEMORY_SAVER_CUDA_GRAPH`` (sglang's own
reader, as sglang does) and the communicator's ``enable_register_for_capturing`` (a missing
attribute means registration is allowed, as with an older aiter). Eager calls pay one attribute
read and one branch.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sglang_aiter_plugin.fixes.reduce_scatter_probe import METHOD, Switch

__all__ = ["TARGET", "Plan", "around_reduce_scatter", "current_plan", "install", "plan_for"]

TARGET = f"sglang.srt.distributed.parallel_state.GroupCoordinator.{METHOD}"
_COPY_IN_ENV = "SGLANG_AITER_CAPTURE_COPY_IN"


@dataclass(frozen=True)
class Plan:
    """What the hook checks while the communicator captures; only the switches sglang ignores."""

    ignored: tuple[Switch, ...]
    copy_in: bool
    """``SGLANG_AITER_CAPTURE_COPY_IN=1`` at start-up and sglang ignores it."""
    tms_switch: Any = None
    """sglang's ``envs.SGLANG_MEMORY_SAVER_CUDA_GRAPH`` when sglang ignores it, else ``None``."""
    honour_comm_flag: bool = False

    def unregistered(self, communicator: Any) -> bool:
        """Whether this capture must not register the caller's tensors."""
        if self.copy_in:
            return True
        if self.honour_comm_flag and not getattr(
            communicator, "enable_register_for_capturing", True
        ):
            return True
        return self.tms_switch is not None and bool(self.tms_switch.get())


def plan_for(ignored: tuple[Switch, ...], envs: Any,
             environ: Mapping[str, str] | None = None) -> Plan:
    """The plan for the switches the installed sglang ignores (``envs``: sglang's ``envs``)."""
    env = os.environ if environ is None else environ
    return Plan(
        ignored=ignored,
        copy_in=Switch.COPY_IN in ignored and env.get(_COPY_IN_ENV, "0") == "1",
        tms_switch=envs.SGLANG_MEMORY_SAVER_CUDA_GRAPH if Switch.TMS in ignored else None,
        honour_comm_flag=Switch.COMM_FLAG in ignored,
    )


class _UnregisteredCommunicator:
    """The communicator, except that ``reduce_scatter`` never registers the caller's tensors."""

    __slots__ = ("_communicator",)

    def __init__(self, communicator: Any) -> None:
        self._communicator = communicator

    def reduce_scatter(self, inp: Any, out: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs["registered"] = False
        return self._communicator.reduce_scatter(inp, out, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._communicator, name)


class _CoordinatorView:
    """The coordinator with its communicator seen through :class:`_UnregisteredCommunicator`."""

    __slots__ = ("_coordinator", "ca_comm")

    def __init__(self, coordinator: Any) -> None:
        self._coordinator = coordinator
        self.ca_comm = _UnregisteredCommunicator(coordinator.ca_comm)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._coordinator, name)


_plan: Plan | None = None
_lock = threading.Lock()


def around_reduce_scatter(original: Callable[..., Any], coordinator: Any, output: Any,
                          input: Any) -> Any:
    """sglang AROUND hook: ``original(coordinator, output, input)``, unregistered if needed.

    The parameters are named like sglang's method's, so keyword calls keep working; the fixed
    signature (no ``*args``/``**kwargs`` repacking) keeps the eager path to one attribute read
    and one branch: it costs what a do-nothing AROUND hook costs.
    """
    if not getattr(coordinator.ca_comm, "_IS_CAPTURING", False):
        return original(coordinator, output, input)
    plan = _plan
    if plan is None or not plan.unregistered(coordinator.ca_comm):
        return original(coordinator, output, input)
    return original(_CoordinatorView(coordinator), output, input)


def current_plan() -> Plan | None:
    """The plan the hook follows in this process, or ``None`` before :func:`install`."""
    return _plan


def install(plan: Plan) -> bool:
    """Set the plan and register the hook with sglang once per process.

    Returns ``True`` when the hook was registered now, ``False`` when it already was (the
    plan is replaced either way). sglang's ``load_plugins()`` applies it; its ``apply_hooks``
    patches a target only once, so the method is wrapped by exactly one layer.
    """
    global _plan
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    with _lock:
        _plan = plan
        registered = HookRegistry._hooks.get(TARGET, ())
        if any(hook is around_reduce_scatter for _, hook, *_ in registered):
            return False
        HookRegistry.register(TARGET, around_reduce_scatter, HookType.AROUND)
        return True
