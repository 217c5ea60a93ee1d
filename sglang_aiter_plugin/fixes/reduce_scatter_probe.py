"""Probe what the installed ``GroupCoordinator._maybe_aiter_reduce_scatter`` does during capture.

The question is behavioural: while a stream is capturing, which ``registered=`` value does the
installed method pass to the AITER communicator's ``reduce_scatter``, with no switch on and with
each switch that makes registration unsafe turned on?

How it runs, and why it is safe to run in every sglang process:

* the method's own code object is called with a *private copy* of its module globals in which
  ``is_hip``, ``envs``, ``torch`` (capture state only), the piecewise-graph flag and the copy-in
  flag give fixed answers. Nothing in sglang, torch or ``os.environ`` is patched, so there is
  nothing to restore, even on error, and no other thread can observe the probe;
* ``self`` is a real ``GroupCoordinator`` made without ``__init__`` (no process group), holding a
  recording communicator that only writes down the ``registered=`` it receives;
* the tensors are 2x8 CPU tensors. Four calls in all, well under a millisecond.
"""

from __future__ import annotations

import enum
import inspect
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["METHOD", "PARAMETERS", "ProbeError", "ProbeResult", "Switch", "probe", "signature_of"]

METHOD = "_maybe_aiter_reduce_scatter"
PARAMETERS = ("self", "output", "input")
"""The method's parameters in every release that has it (0.5.15-0.5.23); the hook relies on them."""
_WORLD_SIZE = 2
_DP_REDUCE_SCATTER = "SGLANG_DP_USE_REDUCE_SCATTER"


class Switch(str, enum.Enum):
    """A condition under which the capture must not register the caller's tensors."""

    TMS = "SGLANG_MEMORY_SAVER_CUDA_GRAPH=1"
    COPY_IN = "SGLANG_AITER_CAPTURE_COPY_IN=1"
    COMM_FLAG = "communicator enable_register_for_capturing=False"

    def __str__(self) -> str:
        return self.value


_COPY_IN_ENV = "SGLANG_AITER_CAPTURE_COPY_IN"
_COPY_IN_GLOBAL = "_AITER_CAPTURE_COPY_IN"
_TMS_ENV = "SGLANG_MEMORY_SAVER_CUDA_GRAPH"


class ProbeError(RuntimeError):
    """The installed method did not behave like any release the probe understands."""


@dataclass(frozen=True)
class ProbeResult:
    """``registered=`` passed during stream capture, by switch (``None``: no switch on)."""

    baseline: bool
    under: Mapping[Switch, bool]

    @property
    def ignored(self) -> tuple[Switch, ...]:
        """Switches under which the installed method still registers (what a fix must add)."""
        if not self.baseline:
            return ()
        return tuple(s for s in Switch if self.under[s])

    @property
    def honoured(self) -> tuple[Switch, ...]:
        return tuple(s for s in Switch if s not in self.ignored)


class _RecordingCommunicator:
    """The attributes sglang's reduce-scatter path reads, and a record of ``registered=``."""

    def __init__(self, register_during_capture: bool) -> None:
        self.disabled = False
        self._IS_CAPTURING = True
        self.enable_register_for_capturing = register_during_capture
        self.registered: list[bool] = []

    def should_custom_ar(self, inp: Any) -> bool:
        return True

    def reduce_scatter(self, inp: Any, out: Any, *args: Any, **kwargs: Any) -> None:
        self.registered.append(bool(kwargs.get("registered", False)))


class _FixedEnv:
    __slots__ = ("_value",)

    def __init__(self, value: bool) -> None:
        self._value = value

    def get(self) -> bool:
        return self._value


class _EnvsView:
    """sglang's ``envs`` with a few fields answering fixed values."""

    def __init__(self, real: Any, fixed: Mapping[str, bool]) -> None:
        self._real = real
        self._fixed = fixed

    def __getattr__(self, name: str) -> Any:
        if name in self._fixed:
            return _FixedEnv(self._fixed[name])
        return getattr(self._real, name)


class _CudaView:
    def __init__(self, real: Any, capturing: bool) -> None:
        self._real = real
        self._capturing = capturing

    def is_current_stream_capturing(self) -> bool:
        return self._capturing

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class _TorchView:
    def __init__(self, real: Any) -> None:
        self._real = real
        self.cuda = _CudaView(real.cuda, capturing=True)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


def _with_globals(fn: Callable[..., Any], overrides: Mapping[str, Any]) -> Callable[..., Any]:
    """``fn``'s code bound to a copy of its globals with ``overrides`` applied."""
    namespace = dict(fn.__globals__)
    namespace.update(overrides)
    clone = types.FunctionType(
        fn.__code__, namespace, fn.__name__, fn.__defaults__, fn.__closure__
    )
    clone.__kwdefaults__ = fn.__kwdefaults__
    return clone


def _registered_during_capture(cls: type, method: Callable[..., Any], *, tms: bool,
                               copy_in: bool, comm_flag: bool) -> bool:
    import torch

    env = {_DP_REDUCE_SCATTER: True, _TMS_ENV: tms, _COPY_IN_ENV: copy_in}
    overrides: dict[str, Any] = {
        "is_hip": lambda: True,
        "is_in_tc_piecewise_cuda_graph": lambda: False,
        "envs": _EnvsView(method.__globals__.get("envs"), env),
        "torch": _TorchView(method.__globals__.get("torch", torch)),
    }
    if _COPY_IN_GLOBAL in method.__globals__:
        overrides[_COPY_IN_GLOBAL] = copy_in
    communicator = _RecordingCommunicator(register_during_capture=comm_flag)
    coordinator: Any = object.__new__(cls)
    coordinator.ca_comm = communicator
    coordinator.world_size = _WORLD_SIZE
    output = torch.zeros((1, 8), dtype=torch.float32)
    inp = torch.zeros((_WORLD_SIZE, 8), dtype=torch.float32)
    handled = _with_globals(method, overrides)(coordinator, output, inp)
    if handled is not True or len(communicator.registered) != 1:
        raise ProbeError(
            f"under a simulated ROCm capture, {cls.__name__}.{METHOD} returned {handled!r} and "
            f"called reduce_scatter {len(communicator.registered)} time(s) (expected True, once)"
        )
    return communicator.registered[0]


def signature_of(cls: type) -> tuple[str, ...]:
    """Parameter names of the installed method, below any hook."""
    method = inspect.unwrap(inspect.getattr_static(cls, METHOD))
    return tuple(inspect.signature(method).parameters)


def probe(cls: type) -> ProbeResult:
    """Run the installed ``cls._maybe_aiter_reduce_scatter`` (below any hook) under capture.

    Raises :class:`ProbeError` (with the reason) when the method behaves unlike any known
    release, and ``AttributeError`` when it does not exist.
    """
    raw = inspect.getattr_static(cls, METHOD)
    if not callable(raw):
        raise ProbeError(f"{cls.__name__}.{METHOD} is {type(raw).__name__}, not a method")
    method = inspect.unwrap(raw)
    try:
        baseline = _registered_during_capture(
            cls, method, tms=False, copy_in=False, comm_flag=True
        )
        under = {
            Switch.TMS: _registered_during_capture(
                cls, method, tms=True, copy_in=False, comm_flag=True
            ),
            Switch.COPY_IN: _registered_during_capture(
                cls, method, tms=False, copy_in=True, comm_flag=True
            ),
            Switch.COMM_FLAG: _registered_during_capture(
                cls, method, tms=False, copy_in=False, comm_flag=False
            ),
        }
    except ProbeError:
        raise
    except Exception as exc:
        raise ProbeError(
            f"{cls.__name__}.{METHOD} raised under a simulated ROCm capture: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    return ProbeResult(baseline=baseline, under=under)
