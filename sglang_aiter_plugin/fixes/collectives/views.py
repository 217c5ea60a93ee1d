"""What sglang's method is handed during a capture that must not register: the unregistered forms.

A hook calls sglang's own method with a :class:`CoordinatorView`: the coordinator, except that
its ``ca_comm`` is a view of aiter's communicator in which the one registering call of that
collective is replaced by its unregistered form. Every other attribute (and whether it exists:
``hasattr`` answers as for the real communicator) is the real object's, so sglang's gates and
branches run unchanged:

* reduce-scatter: ``reduce_scatter(..., registered=False)`` (the input is copied into aiter's
  pre-registered buffer);
* all-gather: ``all_gather_reg`` becomes ``all_gather_unreg`` (same arguments);
* fused all-reduce + RMSNorm: ``custom_fused_ar_rms`` becomes ``fused_ar_rms(...,
  registered=False)``, the form sglang's own piecewise-graph branch uses, and
  ``custom_fused_ar_rms_per_group_quant`` becomes ``fused_ar_rms_per_group_quant(...,
  registered=False)``. A communicator without the unregistered form gets ``None``, which is what
  sglang's method returns when fusion is unavailable: sglang then runs its unfused all-reduce
  and RMSNorm. aiter's own gate (``disabled``, ``should_custom_ar``) is asked first, as aiter does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

__all__ = ["FUSED_FORMS", "CoordinatorView", "UnregisteredAllGather", "UnregisteredFusedArRms",
           "UnregisteredReduceScatter", "fused_forms_taken"]

logger = logging.getLogger("sglang_aiter_plugin")

FUSED_FORMS = {
    "unregistered": "the communicator's unregistered form (registered=False)",
    "unfused": "None (the communicator has no unregistered form), so sglang runs its unfused "
               "all-reduce and RMSNorm",
}
_taken: set[str] = set()


def fused_forms_taken() -> frozenset[str]:
    """Which of :data:`FUSED_FORMS` a fused capture took in this process so far."""
    return frozenset(_taken)


def _took(form: str, method: str) -> None:
    if form not in _taken:
        _taken.add(form)
        logger.info("sglang-aiter-plugin: a fused all-reduce+RMSNorm capture (%s) got %s",
                    method, FUSED_FORMS[form])


class CoordinatorView:
    """The coordinator with ``ca_comm`` replaced by a communicator view."""

    __slots__ = ("_coordinator", "ca_comm")

    def __init__(self, coordinator: Any, communicator: Any) -> None:
        self._coordinator = coordinator
        self.ca_comm = communicator

    def __getattr__(self, name: str) -> Any:
        return getattr(self._coordinator, name)


class _CommunicatorView:
    __slots__ = ("_comm",)

    def __init__(self, communicator: Any) -> None:
        self._comm = communicator

    def _replacement(self, name: str) -> Callable[..., Any] | None:
        return None

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._comm, name)  # a missing attribute stays missing
        replacement = self._replacement(name)
        return value if replacement is None else replacement


class UnregisteredReduceScatter(_CommunicatorView):
    __slots__ = ()

    def _replacement(self, name: str) -> Callable[..., Any] | None:
        if name == "reduce_scatter":
            return self._reduce_scatter
        return None

    def _reduce_scatter(self, inp: Any, out: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs["registered"] = False
        return self._comm.reduce_scatter(inp, out, *args, **kwargs)


class UnregisteredAllGather(_CommunicatorView):
    __slots__ = ()

    def _replacement(self, name: str) -> Callable[..., Any] | None:
        if name == "all_gather_reg":
            return self._comm.all_gather_unreg  # type: ignore[no-any-return]
        return None


class UnregisteredFusedArRms(_CommunicatorView):
    __slots__ = ()

    def _replacement(self, name: str) -> Callable[..., Any] | None:
        if name == "custom_fused_ar_rms":
            return self._fused_ar_rms
        if name == "custom_fused_ar_rms_per_group_quant":
            return self._fused_ar_rms_per_group_quant
        return None

    def _gate(self, inp: Any, method: str) -> Callable[..., Any] | None:
        comm = self._comm
        if comm.disabled or not comm.should_custom_ar(inp):
            return None  # aiter's own answer for this input
        unregistered = getattr(comm, method, None)
        _took("unfused" if unregistered is None else "unregistered", method)
        return unregistered

    def _fused_ar_rms(self, input: Any, residual_inp: Any, weight: Any, eps: float,
                      use_1stage: bool = False, **kwargs: Any) -> Any:
        fused = self._gate(input, "fused_ar_rms")
        if fused is None:
            return None
        return fused(input, residual_inp, w=weight, eps=eps, registered=False,
                     use_1stage=use_1stage, **kwargs)

    def _fused_ar_rms_per_group_quant(self, input: Any, residual_inp: Any, weight: Any,
                                      eps: float, group_size: int = 128,
                                      use_1stage: bool = False, **kwargs: Any) -> Any:
        fused = self._gate(input, "fused_ar_rms_per_group_quant")
        if fused is None:
            return None
        return fused(input, residual_inp, w=weight, eps=eps, group_size=group_size,
                     registered=False, use_1stage=use_1stage, **kwargs)
