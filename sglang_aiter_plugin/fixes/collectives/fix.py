"""How a collective fix decides, and what it installs once it has.

A fix (:class:`CollectiveFix`, a pluggy plugin object) decides on ROCm only, once sglang has
imported ``parallel_state`` (``pending`` until then): ``skipped`` off HIP or where a method is
missing, changed or never calls aiter; ``not needed`` where the probe (:mod:`.probe`) finds no
capture condition ignored; else ``applied``, with one wrapper (:mod:`.wrappers`) per such method
set on ``GroupCoordinator``, checking the fix's :class:`~.plan.Plan` during a capture.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from sglang_aiter_plugin._patch import wrap_once
from sglang_aiter_plugin._post_import import when_imported
from sglang_aiter_plugin._status import FixState, FixStatus
from sglang_aiter_plugin.fixes.collectives import capture_scope
from sglang_aiter_plugin.fixes.collectives.plan import Plan, plan_for
from sglang_aiter_plugin.fixes.collectives.wrappers import UNREGISTERED, is_installed, wrapper
from sglang_aiter_plugin.plugin.spec import FixContext, hookimpl

if TYPE_CHECKING:  # the probe is imported where a fix decides: only on ROCm, once sglang's
    # parallel_state is imported
    from packaging.version import Version

    from sglang_aiter_plugin._ledger import Defect
    from sglang_aiter_plugin.fixes.collectives.probe import Condition, Invoke, ProbeResult

__all__ = ["PARALLEL_STATE", "WHOLE_CAPTURE", "AllReduceFix", "CollectiveFix", "Decision", "Method",
           "calling_with"]

PARALLEL_STATE = "sglang.srt.distributed.parallel_state"
WHOLE_CAPTURE = "graph_capture"
"""The ``GroupCoordinator`` context manager in which sglang captures every graph of a group."""


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
    """A collective fix as a pluggy plugin (``ledger``: its entry in the plugin's ledger, which
    names it; ``title``: the collective, in statuses): on ROCm, once sglang has imported
    ``parallel_state``, it wraps ``methods`` (each probed with ``invoke``) where sglang ignores a
    capture condition, with the :data:`~.wrappers.UNREGISTERED` forms; ``how``: for the
    ``applied`` status."""

    def __init__(self, title: str, *, ledger: Defect, invoke: Invoke,
                 methods: tuple[Method, ...], how: str) -> None:
        self.ledger = ledger
        self.name = ledger.name
        self.title = title
        self.__doc__ = f"Fix ``{ledger.name}``: {ledger.summary}."
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

    def wrap(self, original: Callable[..., Any]) -> Callable[..., Any]:
        """The wrapper for one of :attr:`methods` (:func:`.wrappers.wrapper`, reading
        :attr:`plan` at each call)."""
        return wrapper(original, lambda: self.plan)

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
        # whether a capture registers follows the flag where sglang honours it: known at capture
        flag = (" while the communicator's enable_register_for_capturing is on (read at each "
                "capture)," if replay and Condition.COMM_FLAG not in ignored else "")
        return Decision(
            FixStatus(self.name, FixState.APPLIED,
                      f"{release}'s {names} {registers} during capture{flag} despite "
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

            check = ReplayCheck(module, self.name, self.title)
            self.plan = plan_for(decision.ignored, module.envs, replay=check)
            for name in decision.methods:
                wrap_once(cls, name, self.name, self.wrap)
        return decision.status


class AllReduceFix(CollectiveFix):
    """A :class:`CollectiveFix` that takes on copy-in (where requested) and the ranks replaying
    different graphs only.

    sglang hands a capture's all-reduce to aiter's ``custom_all_reduce``, which follows the
    communicator's ``enable_register_for_capturing``; sglang builds aiter's communicator with
    that off under torch_memory_saver, and its own ROCm communicator captures with
    ``registered=not tms_cudagraph``. So TMS and the communicator flag are sglang's (the
    tripwire tests check both on every release). Left to the plugin: the group's ranks replaying
    different graphs (where sglang captures graph variants) and copy-in, which sglang's all-
    reduce never reads; copy-in counts only where it is requested
    (``SGLANG_AITER_CAPTURE_COPY_IN=1`` at start-up), so a release without graph variants says
    ``not needed`` unless the user asked for copy-in.
    """

    def counted(self, result: ProbeResult, variants: bool) -> tuple[Condition, ...]:
        from sglang_aiter_plugin.fixes.collectives.probe import COPY_IN_ENV, Condition

        copy_in = (Condition.COPY_IN in result.ignored
                   and os.environ.get(COPY_IN_ENV, "0") == "1")
        return tuple(c for c, on in ((Condition.COPY_IN, copy_in), (Condition.REPLAY, variants))
                     if on)

    def honoured(self, found: list[tuple[str, ProbeResult]]) -> str:
        from sglang_aiter_plugin.fixes.collectives.probe import Condition

        return f"{Condition.TMS} (the communicator it builds), {Condition.COMM_FLAG}"

    def decide_now(self, module: Any, version: Version | None) -> FixStatus:
        """As every fix; where ``applied``, also :data:`WHOLE_CAPTURE`: the communicator's flag
        reads off for the whole capture under the plan (:mod:`.capture_scope`), for the readers
        of the flag outside ``GroupCoordinator`` (DeepSeek-V4.1's fused all-reduce + hc_post)."""
        status = super().decide_now(module, version)
        cls = module.GroupCoordinator
        if status.state is FixState.APPLIED and WHOLE_CAPTURE in vars(cls):
            wrap_once(cls, WHOLE_CAPTURE, self.name,
                      lambda original: capture_scope.wrapper(original, lambda: self.plan))
        return status

    def not_needed(self, release: str, names: str, found: list[tuple[str, ProbeResult]],
                   variants: str) -> str:
        from sglang_aiter_plugin.fixes.collectives.probe import COPY_IN_ENV, TMS_ENV

        copy_in = ("sglang's all-reduce honours it" if os.environ.get(COPY_IN_ENV, "0") == "1"
                   else "not set")
        return (f"{variants}; {COPY_IN_ENV}: {copy_in}; {release}'s {names} captures through "
                f"aiter's custom_all_reduce, which follows the communicator flag (sglang turns it "
                f"off under {TMS_ENV}=1)")
