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

from sglang_aiter_plugin._errors import AiterExtError
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
"""How to call the method: ``invoke(method, coordinator)`` with the method's own arguments.

Its tensors are ``torch.empty``: nothing reads their values (the communicator is the probe's
model), and ``zeros``/``ones`` would each add their fill kernel's first-call cost at start-up."""


class ProbeError(AiterExtError, RuntimeError):
    """The installed method did not behave like any release the probe understands."""


class ProbeResult:
    """Whether the capture registers, with no switch on (``baseline``) and under each switch.

    ``methods``: the communicator methods sglang called, in probe order (for the status).
    """

    __slots__ = ("baseline", "methods", "under")

    def __init__(self, baseline: bool, under: Mapping[str, bool],
                 methods: tuple[str, ...] = ()) -> None:
        self.baseline = baseline
        self.under = under
        self.methods = methods

    @property
    def ignored(self) -> tuple[str, ...]:
        """Switches under which the installed method still registers (what a fix must add)."""
        if not self.baseline:
            return ()
        return tuple(s for s in Switch.ALL if self.under[s])

    @property
    def honoured(self) -> tuple[str, ...]:
        return tuple(s for s in Switch.ALL if s not in self.ignored)


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
    """Parameter names of sglang's own ``cls.name`` (below any wrapper), in signature order."""
    function = below_wrappers(cls, name)
    code = getattr(function, "__code__", None)
    if code is None or hasattr(function, "__signature__"):
        return tuple(inspect.signature(function).parameters)
    # read from the code object, as inspect.signature does for a plain function, without
    # building its Signature (these run at start-up in every ROCm process)
    names = code.co_varnames
    positional, keyword_only = code.co_argcount, code.co_kwonlyargcount
    params = list(names[:positional])
    extra = positional + keyword_only
    if code.co_flags & inspect.CO_VARARGS:
        params.append(names[extra])
        extra += 1
    params.extend(names[positional:positional + keyword_only])
    if code.co_flags & inspect.CO_VARKEYWORDS:
        params.append(names[extra])
    return tuple(params)


def _one_call(cls: type, name: str, method: Callable[..., Any], invoke: Invoke,
              comm_flag: bool) -> AiterCall:
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
    own = below_wrappers(cls, name)  # AttributeError / ProbeError before anything runs
    # (tms, copy_in, communicator flag) per run: no switch on, then each switch alone
    runs = {None: (False, False, True), Switch.TMS: (True, False, True),
            Switch.COPY_IN: (False, True, True), Switch.COMM_FLAG: (False, False, False)}
    copies: dict[tuple[bool, bool], Callable[..., Any]] = {}
    calls: dict[str | None, AiterCall] = {}
    try:
        for switch, (tms, copy_in, comm_flag) in runs.items():
            method = copies.get((tms, copy_in))
            if method is None:
                method = copies[tms, copy_in] = simulated(own, tms=tms, copy_in=copy_in)
            calls[switch] = _one_call(cls, name, method, invoke, comm_flag)
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
        under={s: calls[s].registered for s in Switch.ALL},
        methods=methods,
    )
