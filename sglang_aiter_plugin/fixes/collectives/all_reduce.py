"""Fix ``capture-all-reduce``: a probe only; sglang's all-reduce already stays unregistered.

Patches:
    Nothing while the probe finds sglang right (every release 0.5.11-0.5.23). It reads
    ``sglang.srt.distributed.parallel_state:GroupCoordinator._all_reduce_out_place`` and
    ``sglang.srt.distributed.device_communicators.custom_all_reduce:dispatch_custom_allreduce``
    and ``...custom_all_reduce:CustomAllreduce.custom_all_reduce``.
Why:
    All-reduce is the collective every tensor-parallel layer runs; if it registered graph-pool
    memory under ``SGLANG_MEMORY_SAVER_CUDA_GRAPH=1`` or with aiter's
    ``enable_register_for_capturing`` off, capture would abort like its siblings'. The probe
    shows, rather than assumes, that sglang handles it: the coordinator hands the capture to
    aiter's ``custom_all_reduce`` (which follows the communicator's flag), sglang builds aiter's
    communicator with ``enable_register_for_capturing=not SGLANG_MEMORY_SAVER_CUDA_GRAPH``, and
    sglang's own HIP communicator (1-stage / deterministic all-reduce) captures with
    ``registered=not tms_cudagraph``. ``SGLANG_AITER_CAPTURE_COPY_IN`` is sglang's switch for
    all-gather and reduce-scatter staging only (its own comment in ``parallel_state``); sglang
    defines no copy-in for all-reduce, so the probe does not ask for one.
How:
    Three probes under a simulated ROCm capture (:mod:`.simulation`), nothing installed, when
    sglang imports ``custom_all_reduce`` (it does so when it builds its first group
    coordinator, before any capture; importing it at plugin load would cost ~3 ms):
    ``not needed`` when TMS and the communicator flag are both honoured; ``failed`` (with the
    switch named) if a release stops honouring one, since the plugin has no all-reduce wrapper.
Upstream PR:
    None needed.
Remove when:
    Never by itself: it is the evidence that all-reduce needs no fix
    (``tests/fixes/collectives/test_tripwires.py`` turns red if a release changes that).
"""

from __future__ import annotations

import functools
import importlib
import inspect
from collections.abc import Callable
from typing import Any

from packaging.version import Version

from sglang_aiter_plugin._status import FixState, FixStatus
from sglang_aiter_plugin.fixes.collectives.fix import PARALLEL_STATE, on_rocm
from sglang_aiter_plugin.fixes.collectives.probe import (
    NotAiterPath,
    ProbeError,
    below_wrappers,
    parameters,
    probe,
)
from sglang_aiter_plugin.fixes.collectives.simulation import simulated
from sglang_aiter_plugin.fixes.collectives.switches import Switch
from sglang_aiter_plugin.plugin import hookimpl
from sglang_aiter_plugin.plugin.spec import FixContext

__all__ = ["CUSTOM_ALL_REDUCE", "NAME", "aiter_ext_apply_fix", "decide"]

NAME = "capture-all-reduce"
CUSTOM_ALL_REDUCE = "sglang.srt.distributed.device_communicators.custom_all_reduce"
_OUT_PLACE = "_all_reduce_out_place"
_OUT_PLACE_PARAMS = ("self", "input_", "outplace_all_reduce_method")
_FLAG = "enable_register_for_capturing"


def _invoke(method: Callable[..., Any], coordinator: Any) -> Any:
    import torch

    return method(coordinator, torch.empty((1, 8)), "ca")


class _AiterCommunicatorClass:
    """Stands in for aiter's ``CustomAllreduce`` class: only what sglang binds to it is read."""


def _factory_flag(dispatch: Callable[..., Any], tms: bool) -> Any:
    """``enable_register_for_capturing`` that sglang's factory binds for aiter's communicator."""
    copy = simulated(dispatch, tms=tms, copy_in=False,
                     aiter_names={"CustomAllreduce": _AiterCommunicatorClass})
    chosen = copy(*[None] * len(inspect.signature(dispatch).parameters))
    if not isinstance(chosen, functools.partial) or chosen.func is not _AiterCommunicatorClass:
        raise ProbeError(f"dispatch_custom_allreduce chose {chosen!r} on a simulated ROCm host, "
                         "not aiter's communicator")
    return chosen.keywords.get(_FLAG, "unset")


def _own_class_registers(cls: type, tms: bool) -> bool:
    """Whether sglang's own HIP ``CustomAllreduce`` registers during a capture."""
    calls: list[bool] = []
    comm: Any = object.__new__(cls)
    comm.disabled = False
    comm._ptr = 0  # no native handle: its close() (from __del__) has nothing to free
    comm._IS_CAPTURING = True
    comm.tms_cudagraph = tms  # what its constructor reads from SGLANG_MEMORY_SAVER_CUDA_GRAPH
    comm.should_custom_ar = lambda inp: True
    comm._all_reduce_impl = lambda inp, registered: calls.append(bool(registered))
    import torch

    simulated(below_wrappers(cls, "custom_all_reduce"), tms=tms, copy_in=False)(
        comm, torch.empty((1, 8)))
    if len(calls) != 1:
        raise ProbeError(f"{cls.__name__}.custom_all_reduce made {len(calls)} all-reduce call(s) "
                         "under a simulated ROCm capture; expected one")
    return calls[0]


def decide(coordinator: type, car: Any, version: Version | None) -> FixStatus:
    """Probe sglang's all-reduce capture path (nothing is installed)."""
    where = f"sglang {version}" if version is not None else "this sglang"
    if _OUT_PLACE not in vars(coordinator):
        return FixStatus(NAME, FixState.SKIPPED, f"{where} has no GroupCoordinator.{_OUT_PLACE}")
    params = parameters(coordinator, _OUT_PLACE)
    if params != _OUT_PLACE_PARAMS:
        return FixStatus(NAME, FixState.SKIPPED,
                         f"{where} changed GroupCoordinator.{_OUT_PLACE} to ({', '.join(params)});"
                         f" the probe knows ({', '.join(_OUT_PLACE_PARAMS)})")
    try:
        path = probe(coordinator, _OUT_PLACE, _invoke)
        factory = {tms: _factory_flag(car.dispatch_custom_allreduce, tms) for tms in (False, True)}
        own = {tms: _own_class_registers(car.CustomAllreduce, tms) for tms in (False, True)}
    except (ProbeError, NotAiterPath, AttributeError) as exc:
        return FixStatus(NAME, FixState.FAILED,
                         f"{type(exc).__name__}: {exc}; please report this sglang release")
    ignored = []
    if not (path.baseline and not path.under[Switch.COMM_FLAG]):
        ignored.append(f"{Switch.COMM_FLAG} (GroupCoordinator.{_OUT_PLACE} calls "
                       f"{', '.join(path.methods)})")
    if factory != {False: True, True: False}:
        ignored.append(f"{Switch.TMS} (aiter's communicator built with {_FLAG}={factory})")
    if own != {False: True, True: False}:
        ignored.append(f"{Switch.TMS} (sglang's own CustomAllreduce registers: {own})")
    if ignored:
        return FixStatus(NAME, FixState.FAILED,
                         f"{where} registers all-reduce captures despite {'; '.join(ignored)}; "
                         "the plugin has no all-reduce wrapper: please report this release")
    return FixStatus(NAME, FixState.NOT_NEEDED,
                     f"{where} already captures all-reduce unregistered under {Switch.TMS} "
                     f"(aiter's communicator is built with {_FLAG}=False, sglang's own one passes "
                     f"registered=False) and under {Switch.COMM_FLAG} (GroupCoordinator."
                     f"{_OUT_PLACE} calls aiter's custom_all_reduce, which follows it); "
                     "sglang defines no copy-in for all-reduce; nothing installed")


@hookimpl
def aiter_ext_apply_fix(context: FixContext) -> FixStatus:
    version = context.sglang_version

    def decide_now(car: Any) -> FixStatus:
        parallel_state = importlib.import_module(PARALLEL_STATE)
        return decide(parallel_state.GroupCoordinator, car, version)

    return on_rocm(NAME, "all-reduce", version, decide_now, module=CUSTOM_ALL_REDUCE,
                   report=context.report)
