"""Probe what an installed sglang method hands aiter's communicator during a stream capture.

:func:`probe` runs sglang's own method under a simulated ROCm capture with no capture
:class:`Condition`, then with each alone; each run must make one call on
:class:`CaptureCommunicator`, which records whether it registers. The conditions under which it
still registers are what a fix must add. The simulation is a copy of the method
(:func:`~sglang_aiter_plugin._rebind.rebound`) whose globals answer a capturing HIP host: nothing
sglang, torch or ``os.environ`` holds changes. A non-AITER collective raises :class:`NotAiterPath`.
"""

from __future__ import annotations

import enum
import functools
import inspect
import logging
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any, NamedTuple

from sglang_aiter_plugin._errors import AiterExtError
from sglang_aiter_plugin._rebind import Overlay, rebound

__all__ = ["AITER_CALLS", "COPY_IN_ENV", "NO_COLLECTIVE", "PROBED", "TMS_ENV", "AiterCall",
           "CaptureCommunicator", "Condition", "Invoke", "NotAiterPath", "ProbeError",
           "ProbeResult", "below_wrappers", "parameters", "probe", "simulated"]

TMS_ENV = "SGLANG_MEMORY_SAVER_CUDA_GRAPH"
COPY_IN_ENV = "SGLANG_AITER_CAPTURE_COPY_IN"
WORLD_SIZE = 2


class Condition(str, enum.Enum):
    """A condition under which a capture must not register the caller's tensors (the value: its
    label). TMS: torch_memory_saver's pool cannot be IPC-exported; COPY_IN: sglang's request to
    stage through aiter's buffer; COMM_FLAG: aiter's own flag (off for expandable segments);
    REPLAY: the group's ranks may replay different graphs (:mod:`.replay`; read at capture time,
    so the probe does not run it: see :data:`PROBED`)."""

    TMS = f"{TMS_ENV}=1"
    COPY_IN = f"{COPY_IN_ENV}=1"
    COMM_FLAG = "communicator enable_register_for_capturing=False"
    REPLAY = "ranks replaying different graphs"

    __str__ = str.__str__  # the value, as enum.StrEnum (Python 3.11+) does


PROBED = (Condition.TMS, Condition.COPY_IN, Condition.COMM_FLAG)
"""The conditions :func:`probe` runs a method under (each is a switch its code may read)."""


class NotAiterPath(AiterExtError, LookupError):
    """sglang took a collective other than aiter's (raised instead of communicating): the probe
    looked for aiter's call and did not find it."""


class ProbeError(AiterExtError, RuntimeError):
    """The installed method did not behave like any release the probe understands."""


class AiterCall(NamedTuple):
    """One of aiter's communicator methods as a capture meets it: whether it registers (``True``
    or ``False``; ``"flag"``: per its ``enable_register_for_capturing``; ``"given"``: per the call's
    ``registered``), what it returns (with aiter's parameters, so a call aiter would refuse fails),
    and its gate: where that says no, aiter runs no collective and returns ``None`` (or, where
    ``gated_outputs``, ``result``'s outputs unfilled)."""

    registers: bool | str
    result: Callable[..., Any]
    gate: Callable[..., bool] | None = None
    gated_outputs: bool = False


def _gathered(inp: Any, out: Any = None, dim: int = 0) -> Any:
    """aiter's all-gather output: ``out``, or one it allocates (``world_size`` inputs on ``dim``;
    flat for another ``dim``), in the input's dtype (it views integers as floats for the kernel)."""
    if out is not None:
        return out
    if dim == 0:
        shape = (inp.shape[0] * WORLD_SIZE, *inp.shape[1:])
    elif dim in (-1, inp.dim() - 1):
        shape = (*inp.shape[:-1], inp.shape[-1] * WORLD_SIZE)
    else:
        shape = (inp.numel() * WORLD_SIZE,)
    return inp.new_empty(shape)


def _quantised(inp: Any, residual: Any, emit_bf16: bool = False) -> tuple[Any, ...]:
    return (inp, residual, inp, inp) if emit_bf16 else (inp, residual, inp)


def _ar_gate(comm: Any, inp: Any, *args: Any, **kwargs: Any) -> bool:
    return not comm.disabled and bool(comm.should_custom_ar(inp))


def _rs_gate(comm: Any, inp: Any, out: Any, dim: int = 0) -> bool:
    return not comm.disabled and bool(comm.should_custom_rs(inp, dim))


def _bytes_gate(comm: Any, inp: Any, *args: Any, **kwargs: Any) -> bool:
    return not comm.disabled and bool(comm.should_custom_ar_bytes(inp))


def _enabled(comm: Any, *args: Any, **kwargs: Any) -> bool:
    return not comm.disabled


#: aiter's communicator methods a capture may call, as ``custom_all_reduce.py`` defines them in
#: ROCm/aiter e4048607 (each ``custom_*`` call that registers has an unregistered counterpart).
AITER_CALLS: dict[str, AiterCall] = {
    "custom_all_reduce": AiterCall(
        "flag", lambda input, use_new=True, open_fp8_quant=False: input, _ar_gate),
    "custom_all_gather": AiterCall("flag", lambda inp, dim=0: _gathered(inp, None, dim)),
    "custom_reduce_scatter": AiterCall(  # None even on success: reduce_scatter returns nothing
        "flag", lambda input, output, dim=0: None, _rs_gate),
    "reduce_scatter": AiterCall("given", lambda inp, out, dim=0, *, registered=False: None),
    "all_gather_reg": AiterCall(True, _gathered),
    "all_gather_unreg": AiterCall(False, _gathered),
    "custom_fused_ar_rms": AiterCall(
        True, lambda input, residual_inp, weight, eps, use_1stage, out_hidden_dim=0,
        gemma_norm=False: (input, residual_inp), _ar_gate),
    "custom_fused_ar_rms_packed_input": AiterCall(
        False, lambda input, residual_inp, weight, eps, use_1stage, out_hidden_dim=0,
        prefill_support=False, gemma_norm=False: (input, residual_inp), _bytes_gate),
    "custom_fused_ar_rms_quant": AiterCall(
        True, lambda input, residual_inp, weight, eps, use_1stage, gemma_norm=False,
        emit_bf16=False: _quantised(input, residual_inp, emit_bf16), _ar_gate),
    "fused_ar_rms": AiterCall(
        "given", lambda inp, res_inp, *, res_out=None, out=None, scale_out=None, w, eps,
        registered=False, use_1stage=False, post_per_token_quant=False, out_hidden_dim=0,
        gemma_norm=False, emit_bf16=False: (_quantised(inp, res_inp, emit_bf16)
                                            if post_per_token_quant else (inp, res_inp))),
    "custom_fused_ar_rms_per_group_quant": AiterCall(
        True, lambda input, residual_inp, weight, eps, group_size=128, use_1stage=False,
        emit_bf16=False, transpose_scale=False: _quantised(input, residual_inp, emit_bf16),
        _ar_gate),
    "fused_ar_rms_per_group_quant": AiterCall(
        "given", lambda inp, res_inp, *, w, eps, group_size=128, registered=False,
        use_1stage=False, emit_bf16=False, transpose_scale=False:
        _quantised(inp, res_inp, emit_bf16)),
    "custom_fused_ar_rms_mxfp4_quant": AiterCall(
        True, lambda input, residual_inp, weight, eps, use_1stage=False, emit_bf16=False:
        _quantised(input, residual_inp, emit_bf16), _ar_gate),
    "fused_ar_rms_mxfp4_quant": AiterCall(
        "given", lambda inp, res_inp, *, w, eps, registered=False, use_1stage=False,
        emit_bf16=False: _quantised(inp, res_inp, emit_bf16)),
    "custom_fused_qknorm_ar": AiterCall(  # disabled: empty outputs, no collective
        True, lambda qkv_in, q_w, k_w, eps: (qkv_in,) * 3, _enabled, gated_outputs=True),
    "fused_qknorm_ar": AiterCall(
        "given", lambda qkv_in, q_w, k_w, eps, registered=False: (qkv_in,) * 3),
    "custom_fused_qknorm_ar_rope": AiterCall(
        True, lambda qkv_in, q_w, k_w, cos_sin_cache, position_ids, head_dim, rotary_dim, eps:
        (qkv_in,) * 3, _enabled, gated_outputs=True),
    "fused_qknorm_ar_rope": AiterCall(
        "given", lambda qkv_in, q_w, k_w, cos_sin_cache, position_ids, head_dim, rotary_dim,
        eps, registered=False: (qkv_in,) * 3),
}
_signature = functools.cache(inspect.signature)  # each of aiter's calls, read once per process
NO_COLLECTIVE = ("capture", "should_custom_ar", "should_custom_ar_bytes", "should_custom_ag",
                 "should_custom_rs")
"""aiter's communicator methods that run no collective: the capture context (it exports what
registered calls recorded) and the gates."""


class CaptureCommunicator:
    """aiter's ``CustomAllreduce`` while a stream captures: each call of a method in
    :data:`AITER_CALLS` that passes its gate records whether it registers. Its gates
    (``disabled``, ``should_custom_*``) say yes."""

    def __init__(self, *, register_flag: bool) -> None:
        self.disabled = False
        self._IS_CAPTURING = True
        self.enable_register_for_capturing = register_flag
        self.world_size = WORLD_SIZE
        self.calls: list[tuple[str, bool]] = []  # (method, whether it registers)

    def should_custom_ar(self, *args: Any, **kwargs: Any) -> bool:
        return True

    should_custom_ag = should_custom_rs = should_custom_ar_bytes = should_custom_ar

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method not in AITER_CALLS:
            raise AttributeError(method)
        aiter = AITER_CALLS[method]

        def call(*args: Any, **kwargs: Any) -> Any:
            given = _signature(aiter.result).bind(*args, **kwargs)  # aiter's parameters
            if aiter.gate is not None and not aiter.gate(self, *given.args, **given.kwargs):
                return aiter.result(*args, **kwargs) if aiter.gated_outputs else None
            made = (self.enable_register_for_capturing if aiter.registers == "flag"
                    else given.arguments.get("registered", False) if aiter.registers == "given"
                    else aiter.registers)
            self.calls.append((method, bool(made)))
            return aiter.result(*args, **kwargs)

        return call


_UNSET = object()
#: Coordinator attributes a collective may read before it picks a backend: none exists in the
#: probe, so sglang cannot reach a real communicator or process group.
_ABSENT_BACKENDS = ("pynccl_comm", "pymscclpp_comm", "qr_comm", "torch_symm_mem_comm",
                    "pcie_ipc_comm", "hpu_communicator", "xpu_communicator", "npu_communicator",
                    "device_group", "cpu_group")
_SILENT = logging.Logger("sglang_aiter_plugin.probe")  # outside the logging tree: nothing global
_SILENT.disabled = True


def _fixed_env(value: Any) -> Any:
    """One of sglang's ``envs`` fields, with a fixed value (``_UNSET``: not set)."""
    return SimpleNamespace(get=lambda: False if value is _UNSET else value,
                           is_set=lambda: value is not _UNSET)


def _refuse(what: str) -> Callable[..., Any]:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise NotAiterPath(what)

    return refused


class _Refusing:
    """Any attribute is a function that raises :class:`NotAiterPath`."""

    def __init__(self, what: str) -> None:
        self._what = what

    def __getattr__(self, name: str) -> Callable[..., Any]:
        return _refuse(f"{self._what}.{name}")


def _fixed_names(fn: Callable[..., Any], *, tms: bool, copy_in: bool) -> dict[str, Any]:
    """The names in ``fn``'s module that answer as on a capturing ROCm host."""
    import torch

    real_envs = fn.__globals__.get("envs")
    real_torch = fn.__globals__.get("torch", torch)
    fixed_envs = {TMS_ENV: tms, COPY_IN_ENV: copy_in, "SGLANG_DP_USE_REDUCE_SCATTER": True,
                  "SGLANG_USE_AITER_AG": True, "SGLANG_USE_1STAGE_ALLREDUCE": _UNSET,
                  "SGLANG_ENABLE_DETERMINISTIC_INFERENCE": False,
                  "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": False}
    envs = Overlay(real_envs, {name: _fixed_env(value) for name, value in fixed_envs.items()})
    cuda = Overlay(real_torch.cuda, {"is_current_stream_capturing": lambda: True})
    return {
        "is_hip": lambda: True, "_is_hip": True, "_is_cuda": False, "_is_musa": False,
        "is_gfx95_supported": lambda: True, "_use_amd_deterministic_impl": lambda: False,
        "is_in_tc_piecewise_cuda_graph": lambda: False,
        "is_in_piecewise_cuda_graph": lambda: False,
        "get_bool_env_var": lambda name, default="false": name == "SGLANG_USE_AITER_AR",
        "envs": envs,
        "torch": Overlay(real_torch, {"cuda": cuda,
                                      "distributed": _Refusing("torch.distributed")}),
        "all_gather_single": _refuse("all_gather_single"),
        "logger": _SILENT,
        "_AITER_CAPTURE_COPY_IN": copy_in,
    }


def simulated(fn: Callable[..., Any], *, tms: bool, copy_in: bool) -> Callable[..., Any]:
    """A copy of sglang's ``fn`` that sees a ROCm host capturing a CUDA graph."""
    return rebound(fn, _fixed_names(fn, tms=tms, copy_in=copy_in), strict=False)


def _probe_coordinator(cls: type, communicator: CaptureCommunicator) -> Any:
    """A real ``GroupCoordinator`` made without ``__init__``, with aiter's communicator only."""
    coordinator: Any = object.__new__(cls)
    coordinator.ca_comm = communicator
    coordinator.world_size = WORLD_SIZE
    for name in _ABSENT_BACKENDS:
        setattr(coordinator, name, None)
    coordinator._deterministic_collectives_enabled = lambda: False
    coordinator.is_symmetric_memory_enabled = lambda: False
    return coordinator


class ProbeResult(NamedTuple):
    """Whether the capture registers with no condition (``baseline``) and under each one;
    ``methods``: the communicator methods sglang called (for the status); ``registering``: those
    of them that registered."""

    baseline: bool
    under: Mapping[Condition, bool]
    methods: tuple[str, ...] = ()
    registering: tuple[str, ...] = ()

    @property
    def ignored(self) -> tuple[Condition, ...]:
        """Conditions under which the installed method still registers (what a fix must add)."""
        if not self.baseline:
            return ()
        return tuple(c for c in PROBED if self.under[c])


def below_wrappers(cls: type, name: str) -> Callable[..., Any]:
    """sglang's own function for ``cls.name``, below any wrapper (``AttributeError`` if none)."""
    raw = inspect.getattr_static(cls, name)
    if isinstance(raw, (staticmethod, classmethod)):
        raw = raw.__func__
    if not callable(raw):
        raise ProbeError(f"{cls.__name__}.{name} is {type(raw).__name__}, not a method")
    function: Callable[..., Any] = inspect.unwrap(raw)
    return function


def parameters(cls: type, name: str) -> tuple[str, ...]:
    """Parameter names of sglang's own ``cls.name`` (below any wrapper), in signature order."""
    return tuple(inspect.signature(below_wrappers(cls, name)).parameters)


Invoke = Callable[[Callable[..., Any], Any], Any]
"""How to call the method: ``invoke(method, coordinator)`` with the method's own arguments."""


def probe(cls: type, name: str, invoke: Invoke) -> ProbeResult:
    """Run sglang's ``cls.name`` under a simulated capture with each condition (module doc);
    :class:`NotAiterPath`, :class:`ProbeError` (unlike any known release) or ``AttributeError``."""
    own = below_wrappers(cls, name)  # AttributeError / ProbeError before anything runs
    # (tms, copy_in, communicator flag) per run: no condition, then each condition alone
    runs = {None: (False, False, True), Condition.TMS: (True, False, True),
            Condition.COPY_IN: (False, True, True), Condition.COMM_FLAG: (False, False, False)}
    calls: dict[Condition | None, tuple[str, bool]] = {}
    try:
        for condition, (tms, copy_in, comm_flag) in runs.items():
            communicator = CaptureCommunicator(register_flag=comm_flag)
            invoke(simulated(own, tms=tms, copy_in=copy_in),
                   _probe_coordinator(cls, communicator))
            if len(communicator.calls) != 1:
                made = ", ".join(m for m, _ in communicator.calls) or "none"
                raise ProbeError(
                    f"under a simulated ROCm capture, {cls.__name__}.{name} made "
                    f"{len(communicator.calls)} call(s) on aiter's communicator ({made}); "
                    "expected one")
            calls[condition] = communicator.calls[0]
    except (ProbeError, NotAiterPath):
        raise
    except Exception as exc:
        raise ProbeError(
            f"{cls.__name__}.{name} raised under a simulated ROCm capture: "
            f"{type(exc).__name__}: {exc}"
        ) from exc
    return ProbeResult(
        baseline=calls[None][1],
        under={c: calls[c][1] for c in PROBED},
        methods=tuple(dict.fromkeys(m for m, _ in calls.values())),
        registering=tuple(dict.fromkeys(m for m, made in calls.values() if made)),
    )
