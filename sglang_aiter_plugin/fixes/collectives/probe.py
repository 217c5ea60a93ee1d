"""Probe what an installed sglang method hands aiter's communicator during a stream capture.

For one ``GroupCoordinator`` method, :func:`probe` runs sglang's own code (below any wrapper)
under a simulated ROCm capture (:mod:`.simulation`) four times: no switch on, then each
:class:`~.switches.Switch` on alone. Each run must make exactly one call on aiter's
communicator (:mod:`.aiter_model`), which says whether that call registers the caller's tensors.
The result lists the switches the method ignores (it still registers under them): what a fix
must add. Four calls on CPU tensors; no kernel, no process group, nothing patched.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from sglang_aiter_plugin.fixes.collectives.aiter_model import AiterCall, CaptureCommunicator
from sglang_aiter_plugin.fixes.collectives.simulation import (
    NotAiterPath,
    probe_coordinator,
    simulated,
)
from sglang_aiter_plugin.fixes.collectives.switches import Switch

__all__ = ["Invoke", "NotAiterPath", "ProbeError", "ProbeResult", "below_wrappers", "parameters",
           "probe"]

Invoke = Callable[[Callable[..., Any], Any], Any]
"""How to call the method: ``invoke(method, coordinator)`` with the method's own arguments."""


class ProbeError(RuntimeError):
    """The installed method did not behave like any release the probe understands."""


class ProbeResult:
    """Whether the capture registers, with no switch on (``baseline``) and under each switch.

    ``methods``: the communicator methods sglang called, in probe order (for the status).
    """

    __slots__ = ("baseline", "methods", "under")

    def __init__(self, baseline: bool, under: Mapping[Switch, bool],
                 methods: tuple[str, ...] = ()) -> None:
        self.baseline = baseline
        self.under = under
        self.methods = methods

    @property
    def ignored(self) -> tuple[Switch, ...]:
        """Switches under which the installed method still registers (what a fix must add)."""
        if not self.baseline:
            return ()
        return tuple(s for s in Switch if self.under[s])

    @property
    def honoured(self) -> tuple[Switch, ...]:
        return tuple(s for s in Switch if s not in self.ignored)


def below_wrappers(cls: type, name: str) -> Callable[..., Any]:
    """sglang's own function for ``cls.name``, below any wrapper (the plugin's, a HookRegistry's).

    Raises ``AttributeError`` when the class has no such attribute.
    """
    raw = inspect.getattr_static(cls, name)
    if isinstance(raw, (staticmethod, classmethod)):
        raw = raw.__func__
    if not callable(raw):
        raise ProbeError(f"{cls.__name__}.{name} is {type(raw).__name__}, not a method")
    function: Callable[..., Any] = inspect.unwrap(raw)
    return function


def parameters(cls: type, name: str) -> tuple[str, ...]:
    """Parameter names of sglang's own ``cls.name`` (below any wrapper)."""
    return tuple(inspect.signature(below_wrappers(cls, name)).parameters)


def _one_call(cls: type, name: str, invoke: Invoke, *, tms: bool, copy_in: bool,
              comm_flag: bool) -> AiterCall:
    method = simulated(below_wrappers(cls, name), tms=tms, copy_in=copy_in)
    communicator = CaptureCommunicator(register_flag=comm_flag)
    invoke(method, probe_coordinator(cls, communicator))
    if len(communicator.calls) != 1:
        made = ", ".join(c.method for c in communicator.calls) or "none"
        raise ProbeError(
            f"under a simulated ROCm capture, {cls.__name__}.{name} made "
            f"{len(communicator.calls)} call(s) on aiter's communicator ({made}); expected one"
        )
    return communicator.calls[0]


def probe(cls: type, name: str, invoke: Invoke) -> ProbeResult:
    """Run sglang's ``cls.name`` under a simulated capture with each switch (see module doc).

    Raises :class:`NotAiterPath` when the method takes no AITER collective at all,
    :class:`ProbeError` (with the reason) when it behaves unlike any known release, and
    ``AttributeError`` when it does not exist.
    """
    below_wrappers(cls, name)  # AttributeError / ProbeError before anything runs
    runs = {None: {"tms": False, "copy_in": False, "comm_flag": True},
            Switch.TMS: {"tms": True, "copy_in": False, "comm_flag": True},
            Switch.COPY_IN: {"tms": False, "copy_in": True, "comm_flag": True},
            Switch.COMM_FLAG: {"tms": False, "copy_in": False, "comm_flag": False}}
    calls: dict[Switch | None, AiterCall] = {}
    try:
        for switch, kwargs in runs.items():
            calls[switch] = _one_call(cls, name, invoke, **kwargs)
    except (ProbeError, NotAiterPath):
        raise
    except Exception as exc:
        raise ProbeError(
            f"{cls.__name__}.{name} raised under a simulated ROCm capture: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    methods = tuple(dict.fromkeys(c.method for c in calls.values()))
    return ProbeResult(
        baseline=calls[None].registered,
        under={s: calls[s].registered for s in Switch},
        methods=methods,
    )
