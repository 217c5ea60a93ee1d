"""What a capture under a condition sglang ignores gets: the wrapper set on a
``GroupCoordinator`` method, the view of aiter's communicator it hands sglang's method, and the
unregistered form of each registering call (:data:`UNREGISTERED`).

Outside the communicator's capture mode a wrapper calls sglang's method as is; while the stream
captures under a condition of the fix's :class:`~.plan.Plan`, the method gets a coordinator whose
``ca_comm`` is :func:`communicator_view` over :data:`UNREGISTERED`, with the communicator's own
registration flags off (:func:`registration_off`) for calls that read them.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from sglang_aiter_plugin._errors import AiterExtError
from sglang_aiter_plugin._log import log
from sglang_aiter_plugin._patch import patched
from sglang_aiter_plugin._rebind import Overlay
from sglang_aiter_plugin.fixes.collectives.capture_scope import REGISTRATION_OFF, own_flag

if TYPE_CHECKING:
    from sglang_aiter_plugin.fixes.collectives.plan import Plan

__all__ = [
    "UNREGISTERED",
    "FusedArgumentsError",
    "all_gather_unregistered",
    "all_reduce_unregistered",
    "communicator_view",
    "coordinator_for",
    "fused_unregistered",
    "is_installed",
    "qknorm_unregistered",
    "reduce_scatter_unregistered",
    "registration_off",
    "wrapper",
]


class FusedArgumentsError(AiterExtError, TypeError):
    """A fused collective was called with more arguments after ``eps`` than its form takes."""


def wrapper(original: Callable[..., Any], plan: Callable[[], Plan | None]) -> Callable[..., Any]:
    """The wrapper for sglang's ``original`` method; ``plan``: the fix's plan as of the call."""

    def wrapped(coordinator: Any, *args: Any, **kwargs: Any) -> Any:
        comm = getattr(coordinator, "ca_comm", None)
        if comm is None or not getattr(comm, "_IS_CAPTURING", False):
            return original(coordinator, *args, **kwargs)
        target = coordinator_for(plan(), coordinator, comm)
        if target is coordinator:
            return original(coordinator, *args, **kwargs)
        with registration_off(comm):  # also for calls that follow the communicator flag
            return original(target, *args, **kwargs)

    return wrapped


def coordinator_for(plan: Plan | None, coordinator: Any, communicator: Any) -> Any:
    """What sglang's method gets as ``self`` in a capture-mode call: ``coordinator`` itself
    unless the stream captures under a condition of ``plan``, else an overlay whose ``ca_comm``
    is the communicator's view over :data:`UNREGISTERED`."""
    if plan is None:
        return coordinator
    import torch  # imported by sglang long before any capture

    if not torch.cuda.is_current_stream_capturing():
        return coordinator
    if not plan.unregistered(communicator, coordinator):
        return coordinator
    return Overlay(coordinator, {"ca_comm": communicator_view(communicator, UNREGISTERED)})


_FUSED_FORMS = {
    "unregistered": "the communicator's unregistered form (registered=False)",
    "unfused": "None (the communicator has no unregistered form), so sglang runs its unfused "
               "all-reduce and RMSNorm",
}
_taken: set[str] = set()  # logged once per process: each fused form taken, a switchless all-reduce


def communicator_view(communicator: Any, forms: Mapping[str, Callable[..., Any]]) -> Overlay:
    """aiter's communicator, except that each registering call named in ``forms`` (that it has)
    is its unregistered form, ``forms[name](communicator, *args, **kwargs)``."""
    return Overlay(communicator, {name: functools.partial(form, communicator)
                                  for name, form in forms.items() if hasattr(communicator, name)})


def reduce_scatter_unregistered(comm: Any, inp: Any, out: Any, *args: Any, **kwargs: Any) -> Any:
    """``reduce_scatter(..., registered=False)``: the input is copied into aiter's buffer."""
    kwargs["registered"] = False
    return comm.reduce_scatter(inp, out, *args, **kwargs)


def all_gather_unregistered(comm: Any, *args: Any, **kwargs: Any) -> Any:
    """``all_gather_unreg`` in place of ``all_gather_reg`` (same arguments)."""
    return comm.all_gather_unreg(*args, **kwargs)


def fused_unregistered(method: str, *names: str, **fixed: Any) -> Callable[..., Any]:
    """A fused call's form that registers nothing: ``comm.method(..., registered=False)`` (aiter's
    ``fused_ar_rms[_per_group_quant]``, as sglang's piecewise-graph branch uses), the arguments
    after ``eps`` passed by their ``names``, plus ``fixed``; ``None`` ("fusion unavailable") where
    aiter's gate says no or the communicator lacks ``method``."""

    def unregistered(comm: Any, input: Any, residual_inp: Any, weight: Any, eps: float,
                     *rest: Any, **kwargs: Any) -> Any:
        if len(rest) > len(names):
            raise FusedArgumentsError(
                f"{method}: {len(rest)} arguments after eps; it takes {names}")
        if comm.disabled or not comm.should_custom_ar(input):
            return None  # aiter's own answer for this input
        fused = getattr(comm, method, None)
        form = "unfused" if fused is None else "unregistered"
        if form not in _taken:
            _taken.add(form)
            log(logging.INFO, "sglang-aiter-plugin: a fused all-reduce+RMSNorm capture (%s) got "
                "%s", method, _FUSED_FORMS[form], always=False)
        if fused is None:
            return None
        return fused(input, residual_inp, w=weight, eps=eps, registered=False, **fixed,
                     **dict(zip(names, rest, strict=False)), **kwargs)

    return unregistered


def qknorm_unregistered(method: str) -> Callable[..., Any]:
    """A fused qk-norm all-reduce's form that registers nothing: ``comm.method(...,
    registered=False)`` (aiter's ``fused_qknorm_ar[_rope]``, same arguments, which its
    ``custom_<method>`` calls, so a communicator has both); aiter's own ``custom_<method>`` where
    the communicator is disabled (it then runs no collective)."""

    def unregistered(comm: Any, *args: Any, **kwargs: Any) -> Any:
        if comm.disabled:
            return getattr(comm, f"custom_{method}")(*args, **kwargs)
        return getattr(comm, method)(*args, registered=False, **kwargs)

    return unregistered


@contextlib.contextmanager
def registration_off(comm: Any) -> Iterator[None]:
    """The communicator's registration during capture off for the block (aiter's
    ``enable_register_for_capturing``, sglang's own ``tms_cudagraph``, where it has them), put
    back after: a call that reads them copies its input into the pre-registered buffer."""
    saved = {name: own_flag(comm, name) for name, _ in REGISTRATION_OFF if hasattr(comm, name)}
    try:
        for name, off in REGISTRATION_OFF:
            if name in saved:
                setattr(comm, name, off)
        yield
    finally:
        for name, value in saved.items():
            setattr(comm, name, value)


def all_reduce_unregistered(comm: Any, *args: Any, **kwargs: Any) -> Any:
    """``custom_all_reduce`` with registration during capture off for this call: aiter's reads
    its ``enable_register_for_capturing`` at each call (e4048607) and sglang's own captures with
    ``registered=not tms_cudagraph``, so each copies the input into its pre-registered buffer.

    A communicator with neither switch (no sglang release builds one: an aiter without the flag
    fails sglang's construction of it) cannot be taken off its registered path: the call runs as
    is, and a warning says so once per process."""
    if not any(hasattr(comm, name) for name, _ in REGISTRATION_OFF) and "switchless" not in _taken:
        _taken.add("switchless")
        log(logging.WARNING, "sglang-aiter-plugin: a custom all-reduce captured under a condition "
            "that must not register runs on a %s without enable_register_for_capturing or "
            "tms_cudagraph, so it registers the caller's tensors: the capture-all-reduce fix "
            "cannot take it off that path", type(comm).__name__, always=False)
    with registration_off(comm):
        return comm.custom_all_reduce(*args, **kwargs)


#: Each call of aiter's communicator (ROCm/aiter e4048607) that registers the caller's tensors
#: during a capture -> its unregistered form, which every wrapped method's capture gets instead
#: under a condition sglang ignores (whichever of these calls the method makes).
UNREGISTERED: dict[str, Callable[..., Any]] = {
    "custom_all_reduce": all_reduce_unregistered,
    "all_gather_reg": all_gather_unregistered,
    "reduce_scatter": reduce_scatter_unregistered,
    "custom_fused_ar_rms": fused_unregistered(
        "fused_ar_rms", "use_1stage", "out_hidden_dim", "gemma_norm"),
    "custom_fused_ar_rms_quant": fused_unregistered(
        "fused_ar_rms", "use_1stage", "gemma_norm", "emit_bf16", post_per_token_quant=True),
    "custom_fused_ar_rms_per_group_quant": fused_unregistered(
        "fused_ar_rms_per_group_quant", "group_size", "use_1stage", "emit_bf16",
        "transpose_scale"),
    "custom_fused_ar_rms_mxfp4_quant": fused_unregistered(
        "fused_ar_rms_mxfp4_quant", "use_1stage", "emit_bf16"),
    "custom_fused_qknorm_ar": qknorm_unregistered("fused_qknorm_ar"),
    "custom_fused_qknorm_ar_rope": qknorm_unregistered("fused_qknorm_ar_rope"),
}


def is_installed(cls: type, name: str) -> bool:
    """Whether a collective fix's wrapper is anywhere on ``cls.name``."""
    return patched(vars(cls).get(name))
