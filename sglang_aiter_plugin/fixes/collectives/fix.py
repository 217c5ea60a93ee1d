"""How a collective fix decides, what it installs, and what a capture then gets.

A fix (:class:`CollectiveFix`, a pluggy plugin object) decides on ROCm only, once sglang has
imported ``parallel_state`` (``pending`` until then): ``skipped`` off HIP or where a method is
missing, changed or never calls aiter; ``not needed`` where the probe (:mod:`.probe`) finds no
capture condition ignored; else ``applied``, with one wrapper per such method set on
``GroupCoordinator``. Outside the communicator's capture mode a wrapper calls sglang's method as is;
while the stream captures under a condition sglang ignores (:class:`Plan`), the method gets a view
of aiter's communicator whose registering calls are their unregistered forms (:data:`UNREGISTERED`).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import logging
import os
import sys
import types
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from sglang_aiter_plugin._errors import AiterExtError
from sglang_aiter_plugin._log import log
from sglang_aiter_plugin._patch import patched, wrap_once
from sglang_aiter_plugin._post_import import when_imported
from sglang_aiter_plugin._rebind import Overlay
from sglang_aiter_plugin._status import FixState, FixStatus
from sglang_aiter_plugin.plugin import hookimpl
from sglang_aiter_plugin.plugin.spec import FixContext

if TYPE_CHECKING:  # the probe is imported where a fix decides: only on ROCm, once sglang's
    # parallel_state is imported
    from packaging.version import Version

    from sglang_aiter_plugin.fixes.collectives.probe import Condition, Invoke, ProbeResult

__all__ = [
    "PARALLEL_STATE",
    "UNREGISTERED",
    "CollectiveFix",
    "Decision",
    "FusedArgumentsError",
    "Method",
    "Plan",
    "all_gather_unregistered",
    "all_reduce_unregistered",
    "calling_with",
    "communicator_view",
    "fused_unregistered",
    "is_installed",
    "plan_for",
    "qknorm_unregistered",
    "reduce_scatter_unregistered",
    "registration_off",
]


class FusedArgumentsError(AiterExtError, TypeError):
    """A fused collective was called with more arguments after ``eps`` than its form takes."""

PARALLEL_STATE = "sglang.srt.distributed.parallel_state"


class Plan(NamedTuple):
    """The conditions sglang ignores, as a wrapper checks them during a capture: ``copy_in``
    (read at start-up), ``tms`` (sglang's ``envs`` field, read per call), ``comm_flag``,
    ``replay`` (:class:`~.replay.ReplayCheck`: whether the group's ranks may replay different
    graphs, read per call from what sglang is capturing)."""

    copy_in: bool = False
    tms: Any = None
    comm_flag: bool = False
    replay: Callable[[Any, Any], bool] | None = None

    def unregistered(self, communicator: Any, coordinator: Any = None) -> bool:
        """Whether this capture (in ``coordinator``'s group) must not register the caller's
        tensors."""
        if self.copy_in:
            return True
        if self.comm_flag and not getattr(communicator, "enable_register_for_capturing", True):
            return True
        if self.tms is not None and bool(self.tms.get()):
            return True
        return self.replay is not None and self.replay(coordinator, communicator)


def plan_for(ignored: tuple[Condition, ...], envs: Any,
             environ: Mapping[str, str] | None = None,
             replay: Callable[[Any, Any], bool] | None = None) -> Plan:
    """The plan for the conditions sglang ignores; copy-in as sglang reads it (once, ``"1"``);
    ``replay``: the check for :attr:`~.probe.Condition.REPLAY`, where that is ignored."""
    from sglang_aiter_plugin.fixes.collectives.probe import COPY_IN_ENV, TMS_ENV, Condition

    env = os.environ if environ is None else environ
    return Plan(
        copy_in=Condition.COPY_IN in ignored and env.get(COPY_IN_ENV, "0") == "1",
        tms=getattr(envs, TMS_ENV) if Condition.TMS in ignored else None,
        comm_flag=Condition.COMM_FLAG in ignored,
        replay=replay if Condition.REPLAY in ignored else None,
    )


_FUSED_FORMS = {
    "unregistered": "the communicator's unregistered form (registered=False)",
    "unfused": "None (the communicator has no unregistered form), so sglang runs its unfused "
               "all-reduce and RMSNorm",
}
_taken: set[str] = set()  # the fused forms this process took (each is logged once)


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


_REGISTRATION_OFF = (("enable_register_for_capturing", False),  # aiter's communicator
                     ("tms_cudagraph", True))  # sglang's own (ROCm): registered=not tms_cudagraph


@contextlib.contextmanager
def registration_off(comm: Any) -> Iterator[None]:
    """The communicator's registration during capture off for the block (aiter's
    ``enable_register_for_capturing``, sglang's own ``tms_cudagraph``, where it has them), put
    back after: a call that reads them copies its input into the pre-registered buffer."""
    saved = {name: getattr(comm, name) for name, _ in _REGISTRATION_OFF if hasattr(comm, name)}
    try:
        for name, off in _REGISTRATION_OFF:
            if name in saved:
                setattr(comm, name, off)
        yield
    finally:
        for name, value in saved.items():
            setattr(comm, name, value)


def all_reduce_unregistered(comm: Any, *args: Any, **kwargs: Any) -> Any:
    """``custom_all_reduce`` with registration during capture off for this call: aiter's reads
    its ``enable_register_for_capturing`` at each call (e4048607) and sglang's own captures with
    ``registered=not tms_cudagraph``, so each copies the input into its pre-registered buffer."""
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


def calling_with(*shapes: tuple[int, ...], then: tuple[Any, ...] = ()) -> Invoke:
    """A probe's :data:`~.probe.Invoke`: empty tensors of ``shapes`` (nothing reads them), then
    ``then``."""

    def invoke(method: Callable[..., Any], coordinator: Any) -> Any:
        import torch

        return method(coordinator, *(torch.empty(shape) for shape in shapes), *then)

    return invoke


class Method(NamedTuple):
    """A ``GroupCoordinator`` method a fix wraps, the parameter lists it suits; ``optional``:
    missing in some releases without making the fix ``skipped``."""

    name: str
    signatures: tuple[tuple[str, ...], ...]
    optional: bool = False


class Decision(NamedTuple):
    """A fix's status, the conditions sglang ignores and the methods to wrap (if ``applied``)."""

    status: FixStatus
    ignored: tuple[Condition, ...] = ()
    methods: tuple[str, ...] = ()


class CollectiveFix:
    """A collective fix as a pluggy plugin (its ledger as ``__doc__``; ``title``: the collective,
    in statuses): on ROCm, once sglang has imported ``parallel_state``, it wraps ``methods``
    (each probed with ``invoke``) where sglang ignores a capture condition, with the
    :data:`UNREGISTERED` forms; ``how``: for the ``applied`` status."""

    def __init__(self, name: str, title: str, *, invoke: Invoke, methods: tuple[Method, ...],
                 how: str, ledger: str) -> None:
        self.name = name
        self.title = title
        self.__doc__ = ledger
        self.methods = methods
        self.invoke = invoke
        self.how = how
        self.plan: Plan | None = None

    def _decided(self, state: FixState, detail: str) -> Decision:
        return Decision(FixStatus(self.name, state, detail))

    @hookimpl
    def aiter_ext_apply_fix(self, context: FixContext) -> FixStatus:
        version = context.sglang_version
        if version is None:
            return FixStatus(self.name, FixState.SKIPPED, "sglang is not installed")
        if not importlib.import_module("sglang.srt.utils").is_hip():  # sglang's own answer
            return FixStatus(self.name, FixState.SKIPPED,
                             f"not a ROCm (HIP) platform: sglang never takes an AITER "
                             f"{self.title} here; nothing installed")
        imported = sys.modules.get(PARALLEL_STATE)
        if imported is not None:
            return self.decide_now(imported, version)
        decided: list[FixStatus] = []

        def later(module: Any) -> None:
            decided.append(self.decide_now(module, version))
            context.report(decided[-1])

        if when_imported(PARALLEL_STATE, later):  # imported meanwhile: decided now
            return decided[-1]
        return FixStatus(self.name, FixState.PENDING,
                         f"decided when sglang imports {PARALLEL_STATE} (not imported yet in "
                         "this process; every process that runs collectives imports it first)",
                         waiting_for=(PARALLEL_STATE,))

    def coordinator_for(self, coordinator: Any, communicator: Any) -> Any:
        """What sglang's method gets as ``self`` in a capture-mode call."""
        plan = self.plan
        if plan is None:
            return coordinator
        import torch  # imported by sglang long before any capture

        if not torch.cuda.is_current_stream_capturing():
            return coordinator
        if not plan.unregistered(communicator, coordinator):
            return coordinator
        return Overlay(coordinator, {"ca_comm": communicator_view(communicator, UNREGISTERED)})

    def wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """The wrapper for one of :attr:`methods` (the module docstring)."""

        def wrapper(coordinator: Any, *args: Any, **kwargs: Any) -> Any:
            comm = getattr(coordinator, "ca_comm", None)
            if comm is None or not getattr(comm, "_IS_CAPTURING", False):
                return original(coordinator, *args, **kwargs)
            target = self.coordinator_for(coordinator, comm)
            if target is coordinator:
                return original(coordinator, *args, **kwargs)
            with registration_off(comm):  # also for calls that follow the communicator flag
                return original(target, *args, **kwargs)

        return wrapper

    def decide(self, cls: type, version: Version | None) -> Decision:
        """Probe :attr:`methods` on ``cls`` (nothing is installed)."""
        from sglang_aiter_plugin.fixes.collectives.probe import (
            Condition,
            NotAiterPath,
            ProbeError,
            parameters,
            probe,
        )
        from sglang_aiter_plugin.fixes.collectives.replay import replay_possible

        release = f"sglang {version}" if version is not None else "this sglang"
        found: list[tuple[str, ProbeResult]] = []
        absent: list[str] = []
        for method in self.methods:
            qualname = f"GroupCoordinator.{method.name}"
            if method.name not in vars(cls):
                if method.optional:
                    absent.append(qualname)
                    continue
                return self._decided(FixState.SKIPPED, f"{release} has no {qualname}: "
                                     f"no AITER {self.title} path to fix")
            params = parameters(cls, method.name)
            if params not in method.signatures:
                known = " or ".join(f"({', '.join(s)})" for s in method.signatures)
                return self._decided(FixState.SKIPPED, f"{release} changed {qualname} to "
                                     f"({', '.join(params)}); the fix knows {known}, so it "
                                     "leaves sglang unchanged")
            try:
                found.append((method.name, probe(cls, method.name, self.invoke)))
            except NotAiterPath as exc:
                return self._decided(FixState.SKIPPED, f"{release}'s {qualname} never "
                                     f"calls aiter's communicator (it takes {exc}): no AITER "
                                     f"{self.title} path")
            except ProbeError as exc:
                return self._decided(FixState.FAILED, f"{exc}; sglang unchanged, please report "
                                     "this sglang release")
        names = " and ".join(f"GroupCoordinator.{name}" for name, _ in found)
        note = f" ({', '.join(absent)}: not in {release})" if absent else ""
        variants = replay_possible()
        counted = {name: self.counted(result, variants[0]) for name, result in found}
        needed = [(name, result) for name, result in found if counted[name]]
        formless = sorted({c for _, r in needed if r.under[Condition.COMM_FLAG]  # flag ignored
                           for c in r.registering if c not in UNREGISTERED})
        if formless:  # a wrapper could not take it off the registered path
            return self._decided(FixState.FAILED, f"{release}'s {names} register during capture "
                                 f"through aiter's {', '.join(formless)}, which has no "
                                 "unregistered form the plugin knows; sglang unchanged, please "
                                 "report this sglang release")
        if not needed:
            return self._decided(FixState.NOT_NEEDED,
                                 self.not_needed(release, names, found, variants[1]) + note)
        # one plan serves all the methods: a condition a method already honours is harmless
        ignored = tuple(c for c in Condition if any(c in counted[name] for name, _ in needed))
        honoured = self.honoured(found)
        registers = "registers" if len(found) == 1 else "register"
        replay = f" ({variants[1]})" if Condition.REPLAY in ignored else ""
        return Decision(
            FixStatus(self.name, FixState.APPLIED,
                      f"{release}'s {names} {registers} during capture despite "
                      f"{', '.join(ignored)}{replay}; {self.how}; sglang itself honours: "
                      f"{honoured}{note}"),
            ignored=ignored, methods=tuple(name for name, _ in needed))

    def counted(self, result: ProbeResult, variants: bool) -> tuple[Condition, ...]:
        """The conditions this fix takes on for a method: those its probe found ignored, and
        :attr:`~.probe.Condition.REPLAY` where sglang captures graph variants (no release's
        method reads it: only a communicator flag that sglang turns off could, and the wrapper
        checks that flag at the capture)."""
        from sglang_aiter_plugin.fixes.collectives.probe import Condition

        return (*result.ignored, *((Condition.REPLAY,) if variants else ()))

    def honoured(self, found: list[tuple[str, ProbeResult]]) -> str:
        """The conditions sglang honours itself in every probed method, for the status."""
        from sglang_aiter_plugin.fixes.collectives.probe import PROBED

        return ", ".join(c for c in PROBED
                         if not any(c in result.ignored for _, result in found)) or "none"

    def not_needed(self, release: str, names: str, found: list[tuple[str, ProbeResult]],
                   variants: str) -> str:
        """Why no method needs the fix (``variants``: whether sglang captures graph variants)."""
        from sglang_aiter_plugin.fixes.collectives.probe import PROBED

        honoured = ", ".join(PROBED) if found else "-"  # no method ignores any
        verb = "captures" if len(found) == 1 else "capture"
        return f"{release}'s {names} already {verb} unregistered under: {honoured}; {variants}"

    def decide_now(self, module: Any, version: Version | None) -> FixStatus:
        cls = module.GroupCoordinator
        decision = self.decide(cls, version)
        for name in decision.methods:  # all or nothing: check before wrapping any
            current = vars(cls)[name]
            if not isinstance(current, types.FunctionType) and not is_installed(cls, name):
                return FixStatus(self.name, FixState.FAILED,
                                 f"GroupCoordinator.{name} is {type(current).__name__}, not a "
                                 "function; sglang unchanged, please report this sglang release")
        if decision.methods:
            from sglang_aiter_plugin.fixes.collectives.replay import ReplayCheck

            self.plan = plan_for(decision.ignored, module.envs, replay=ReplayCheck(module))
            for name in decision.methods:
                wrap_once(cls, name, self.name, self.wrap)
        return decision.status
