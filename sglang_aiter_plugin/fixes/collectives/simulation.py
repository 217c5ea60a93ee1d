"""A simulated ROCm stream capture, as sglang's own code sees it, with nothing patched.

sglang's methods find the platform, its switches and the capture state through names in their
module (``is_hip``, ``envs``, ``torch``, ``_AITER_CAPTURE_COPY_IN``, ...). The probe runs a
copy of each method over a copy of its module's globals in which those names give fixed answers
(:func:`sglang_aiter_plugin._rebind.rebound`); nothing sglang, torch or ``os.environ`` holds is
changed, so nothing has to be put back and no other thread can observe a probe.

The fixed answers: a HIP (gfx95) host; aiter's all-gather, reduce-scatter and all-reduce wanted;
no deterministic or 1-stage all-reduce; not in a piecewise graph; the current stream capturing;
``SGLANG_MEMORY_SAVER_CUDA_GRAPH`` and ``SGLANG_AITER_CAPTURE_COPY_IN`` as the probe asks. Any
fall-back to a non-AITER collective (``torch.distributed``, ``all_gather_single``) raises
:class:`NotAiterPath` instead of communicating.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from sglang_aiter_plugin._errors import AiterExtError
from sglang_aiter_plugin._rebind import rebound
from sglang_aiter_plugin.fixes.collectives.aiter_model import WORLD_SIZE, CaptureCommunicator
from sglang_aiter_plugin.fixes.collectives.switches import COPY_IN_ENV, TMS_ENV

__all__ = ["AITER_MODULE", "NotAiterPath", "probe_coordinator", "simulated"]

AITER_MODULE = "aiter.dist.device_communicators.custom_all_reduce"
"""Where sglang imports aiter's communicator from, inside its functions."""
_COPY_IN_GLOBAL = "_AITER_CAPTURE_COPY_IN"
_UNSET = object()

#: Coordinator attributes a collective may read before it picks a backend: none of them exists
#: in the probe, so sglang cannot reach a real communicator or process group.
_ABSENT_BACKENDS = ("pynccl_comm", "pymscclpp_comm", "qr_comm", "torch_symm_mem_comm",
                    "pcie_ipc_comm", "hpu_communicator", "xpu_communicator", "npu_communicator",
                    "device_group", "cpu_group")


class NotAiterPath(AiterExtError):
    """sglang took a collective other than aiter's (raised instead of communicating)."""


class _FixedEnv:
    __slots__ = ("_value",)

    def __init__(self, value: Any) -> None:
        self._value = value

    def get(self) -> Any:
        return False if self._value is _UNSET else self._value

    def is_set(self) -> bool:
        return self._value is not _UNSET


class _EnvsView:
    """sglang's ``envs`` with some fields answering fixed values."""

    def __init__(self, real: Any, fixed: Mapping[str, Any]) -> None:
        self._real = real
        self._fixed = fixed

    def __getattr__(self, name: str) -> Any:
        if name in self._fixed:
            return _FixedEnv(self._fixed[name])
        return getattr(self._real, name)


class _Refusing:
    """Any attribute is a function that raises :class:`NotAiterPath`."""

    def __init__(self, what: str) -> None:
        self._what = what

    def __getattr__(self, name: str) -> Callable[..., Any]:
        return _refuse(f"{self._what}.{name}")


def _refuse(what: str) -> Callable[..., Any]:
    def refused(*args: Any, **kwargs: Any) -> Any:
        raise NotAiterPath(what)

    return refused


class _CudaView:
    def __init__(self, real: Any) -> None:
        self._real = real

    def is_current_stream_capturing(self) -> bool:
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


class _TorchView:
    def __init__(self, real: Any) -> None:
        self._real = real
        self.cuda = _CudaView(real.cuda)
        self.distributed = _Refusing("torch.distributed")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


_SILENT = logging.Logger("sglang_aiter_plugin.probe")  # outside the logging tree: nothing global
_SILENT.disabled = True


_made: dict[tuple[int, int, bool, bool], tuple[Any, Any, dict[str, Any]]] = {}


def _overrides(fn: Callable[..., Any], *, tms: bool, copy_in: bool) -> dict[str, Any]:
    """The fixed answers for ``fn``'s module; the same objects for the same module and switches,
    so that :func:`~sglang_aiter_plugin._rebind.rebound` can reuse its copies."""
    import torch

    real_envs = fn.__globals__.get("envs")
    real_torch = fn.__globals__.get("torch", torch)
    key = (id(real_envs), id(real_torch), tms, copy_in)
    made = _made.get(key)
    if made is not None and made[0] is real_envs and made[1] is real_torch:
        return made[2]
    names = _make(real_envs, real_torch, tms=tms, copy_in=copy_in)
    _made[key] = (real_envs, real_torch, names)
    return names


def _make(real_envs: Any, real_torch: Any, *, tms: bool, copy_in: bool) -> dict[str, Any]:
    envs = _EnvsView(real_envs, {
        TMS_ENV: tms,
        COPY_IN_ENV: copy_in,
        "SGLANG_DP_USE_REDUCE_SCATTER": True,
        "SGLANG_USE_AITER_AG": True,
        "SGLANG_USE_1STAGE_ALLREDUCE": _UNSET,
        "SGLANG_ENABLE_DETERMINISTIC_INFERENCE": False,
        "SGLANG_OPT_USE_CUSTOM_ALL_REDUCE_V2": False,
    })
    return {
        "is_hip": lambda: True,
        "_is_hip": True,
        "_is_cuda": False,
        "_is_musa": False,
        "is_gfx95_supported": lambda: True,
        "is_in_tc_piecewise_cuda_graph": lambda: False,
        "is_in_piecewise_cuda_graph": lambda: False,
        "_use_amd_deterministic_impl": lambda: False,
        "get_bool_env_var": lambda name, default="false": name == "SGLANG_USE_AITER_AR",
        "envs": envs,
        "torch": _TorchView(real_torch),
        "all_gather_single": _refuse("all_gather_single"),
        "logger": _SILENT,
        _COPY_IN_GLOBAL: copy_in,
    }


def simulated(fn: Callable[..., Any], *, tms: bool, copy_in: bool,
              aiter_names: Mapping[str, Any] | None = None) -> Callable[..., Any]:
    """A copy of sglang's ``fn`` that sees a ROCm host capturing a CUDA graph.

    ``aiter_names``: what ``from aiter.dist.device_communicators.custom_all_reduce import ...``
    inside ``fn`` gives (aiter itself is never imported).
    """
    names = _overrides(fn, tms=tms, copy_in=copy_in)
    if aiter_names:
        return rebound(fn, {**names, **aiter_names}, module=AITER_MODULE, strict=False)
    return rebound(fn, names, strict=False)


def probe_coordinator(cls: type, communicator: CaptureCommunicator) -> Any:
    """A real ``GroupCoordinator`` made without ``__init__``: aiter's communicator and no other.

    Its deterministic-collectives gate answers ``False`` (a fixed answer, like ``is_hip``).
    """
    coordinator: Any = object.__new__(cls)
    coordinator.ca_comm = communicator
    coordinator.world_size = WORLD_SIZE
    for name in _ABSENT_BACKENDS:
        setattr(coordinator, name, None)
    coordinator._deterministic_collectives_enabled = lambda: False
    coordinator.is_symmetric_memory_enabled = lambda: False
    return coordinator
