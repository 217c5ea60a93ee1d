"""Whether the installed sglang's all-reduce registers the caller's tensors during a CUDA-graph
capture despite a capture condition: what would make the plugin need an all-reduce fix.

Every supported release honours both all-reduce conditions (copy-in is not one in sglang), so
the plugin has no all-reduce fix; ``tests/fixes/collectives/test_tripwires.py`` and the
compatibility matrix ask here, on every release, through sglang's real code under the plugin's
simulated ROCm capture (:mod:`sglang_aiter_plugin.fixes.collectives.probe`), three places:

* ``GroupCoordinator._all_reduce_out_place`` must hand a capture to aiter's ``custom_all_reduce``,
  which follows the communicator's ``enable_register_for_capturing`` (the communicator flag);
* ``dispatch_custom_allreduce`` must build aiter's communicator with that flag off under
  ``SGLANG_MEMORY_SAVER_CUDA_GRAPH=1`` (TMS) and on otherwise;
* sglang's own HIP ``CustomAllreduce.custom_all_reduce`` must capture with ``registered=False``
  under TMS (its ``tms_cudagraph``) and ``True`` otherwise.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from types import ModuleType
from typing import Any

from sglang_aiter_plugin._rebind import rebound
from sglang_aiter_plugin.fixes.collectives import ALL_REDUCE
from sglang_aiter_plugin.fixes.collectives.fix import PARALLEL_STATE, calling_with
from sglang_aiter_plugin.fixes.collectives.probe import (
    Condition,
    ProbeError,
    below_wrappers,
    parameters,
    probe,
    simulated,
)

__all__ = ["CUSTOM_ALL_REDUCE", "OUT_PLACE", "registering"]

CUSTOM_ALL_REDUCE = "sglang.srt.distributed.device_communicators.custom_all_reduce"
AITER_COMMUNICATOR_MODULE = "aiter.dist.device_communicators.custom_all_reduce"
"""Where sglang imports aiter's communicator from, inside its functions."""
OUT_PLACE = ALL_REDUCE.methods[0].name  # the method capture-all-reduce probes
OUT_PLACE_PARAMS = ("self", "input_", "outplace_all_reduce_method")
REGISTER_FLAG = "enable_register_for_capturing"
_RIGHT = {False: True, True: False}  # TMS off -> registers, TMS on -> does not


class _AiterCommunicatorClass:
    """Stands in for aiter's ``CustomAllreduce`` class: only what sglang binds to it is read."""


def factory_flag(dispatch: Any, tms: bool) -> Any:
    """``enable_register_for_capturing`` that ``dispatch_custom_allreduce`` binds for aiter's
    communicator on a simulated ROCm host (``"unset"`` when it binds none)."""
    copy = rebound(simulated(dispatch, tms=tms, copy_in=False),
                   {"CustomAllreduce": _AiterCommunicatorClass}, module=AITER_COMMUNICATOR_MODULE,
                   strict=False)
    chosen = copy(*[None] * len(inspect.signature(dispatch).parameters))
    if not isinstance(chosen, functools.partial) or chosen.func is not _AiterCommunicatorClass:
        raise ProbeError(f"dispatch_custom_allreduce chose {chosen!r} on a simulated ROCm host, "
                         "not aiter's communicator")
    return chosen.keywords.get(REGISTER_FLAG, "unset")


def own_class_registers(cls: type, tms: bool) -> bool:
    """Whether sglang's own HIP ``CustomAllreduce`` registers during a simulated capture."""
    import torch

    calls: list[bool] = []
    comm: Any = object.__new__(cls)
    comm.disabled = False
    comm._ptr = 0  # no native handle: its close() (from __del__) has nothing to free
    comm._IS_CAPTURING = True
    comm.tms_cudagraph = tms  # what its constructor reads from SGLANG_MEMORY_SAVER_CUDA_GRAPH
    comm.should_custom_ar = lambda inp: True
    comm._all_reduce_impl = lambda inp, registered: calls.append(bool(registered))
    simulated(below_wrappers(cls, "custom_all_reduce"), tms=tms, copy_in=False)(
        comm, torch.empty((1, 8)))
    if len(calls) != 1:
        raise ProbeError(f"{cls.__name__}.custom_all_reduce made {len(calls)} all-reduce call(s) "
                         "under a simulated ROCm capture; expected one")
    return calls[0]


def registering(coordinator: type | None = None, car: ModuleType | None = None) -> list[str]:
    """Each place where the all-reduce of ``coordinator`` (sglang's ``GroupCoordinator``) and
    ``car`` (its ``custom_all_reduce`` module) registers during a capture despite a condition;
    empty when sglang honours both. :class:`ProbeError` (or ``AttributeError``) where a release
    no longer looks like one the probe understands: that needs a look as much as a registration."""
    if coordinator is None:
        coordinator = importlib.import_module(PARALLEL_STATE).GroupCoordinator
    if car is None:
        car = importlib.import_module(CUSTOM_ALL_REDUCE)
    method = f"GroupCoordinator.{OUT_PLACE}"
    if OUT_PLACE not in vars(coordinator):
        raise ProbeError(f"this sglang has no {method}")
    if (params := parameters(coordinator, OUT_PLACE)) != OUT_PLACE_PARAMS:
        raise ProbeError(f"this sglang changed {method} to ({', '.join(params)}); the probe "
                         f"knows ({', '.join(OUT_PLACE_PARAMS)})")
    path = probe(coordinator, OUT_PLACE, calling_with((1, 8), then=("ca",)))
    factory = {tms: factory_flag(car.dispatch_custom_allreduce, tms) for tms in _RIGHT}
    own = {tms: own_class_registers(car.CustomAllreduce, tms) for tms in _RIGHT}
    found = []
    if not (path.baseline and not path.under[Condition.COMM_FLAG]):
        found.append(f"{Condition.COMM_FLAG} ({method} calls {', '.join(path.methods)})")
    if factory != _RIGHT:
        found.append(f"{Condition.TMS} (aiter's communicator built with {REGISTER_FLAG}="
                     f"{factory})")
    if own != _RIGHT:
        found.append(f"{Condition.TMS} (sglang's own CustomAllreduce registers: {own})")
    return found
