"""The decision every collective fix makes, and where it installs: shared by the fix modules.

For one collective (:class:`Collective`: its ``GroupCoordinator`` methods, the parameters the
wrappers were written for, how the probe calls each):

1. not a HIP platform (sglang's ``is_hip()``): ``skipped``, nothing imported or installed;
2. ``sglang.srt.distributed.parallel_state`` not imported yet: the decision waits for it (a
   post-import step), the status says ``pending`` and the decision is logged when made; every
   process that runs collectives (launcher, engine, schedulers) has imported it before sglang
   loads plugins (the all-reduce probe waits for ``custom_all_reduce`` instead);
3. a method missing or with other parameters: ``skipped``; a method that never calls aiter:
   ``skipped``; the probe (:mod:`.probe`) finds nothing ignored: ``not needed``; otherwise the
   wrappers are installed (:mod:`.install`) with the plan for the ignored switches: ``applied``.
"""

from __future__ import annotations

import functools
import importlib
import logging
import sys
import types
from collections.abc import Callable
from typing import Any

from packaging.version import Version

from sglang_aiter_plugin._post_import import when_imported
from sglang_aiter_plugin._status import FixState, FixStatus
from sglang_aiter_plugin.fixes.collectives.hook import Hook
from sglang_aiter_plugin.fixes.collectives.install import install, is_installed
from sglang_aiter_plugin.fixes.collectives.probe import (
    Invoke,
    NotAiterPath,
    ProbeError,
    ProbeResult,
    parameters,
    probe,
)
from sglang_aiter_plugin.fixes.collectives.switches import Switch, plan_for

__all__ = ["PARALLEL_STATE", "Collective", "Decision", "Method", "apply", "decide",
           "is_hip_platform", "on_rocm", "record_settled", "settled"]

PARALLEL_STATE = "sglang.srt.distributed.parallel_state"
logger = logging.getLogger("sglang_aiter_plugin")

Wrap = Callable[[Callable[..., Any], Hook], Callable[..., Any]]


# Plain classes, not dataclasses: these modules load in every ROCm process at start-up.


class Method:
    """One ``GroupCoordinator`` method a collective fix wraps.

    ``signatures``: the parameter lists the wrapper was written for; ``invoke``: how the probe
    calls it; ``wrap``: builds the wrapper; ``optional``: missing in some releases without
    making the fix ``skipped`` (it wraps the others).
    """

    __slots__ = ("invoke", "name", "optional", "signatures", "wrap")

    def __init__(self, name: str, signatures: tuple[tuple[str, ...], ...], invoke: Invoke,
                 wrap: Wrap, optional: bool = False) -> None:
        self.name = name
        self.signatures = signatures
        self.invoke = invoke
        self.wrap = wrap
        self.optional = optional


class Collective:
    """One collective fix: its name (switches, log line, ``doctor``), title, methods, hook, and
    ``how``, what the installed wrapper does (for the ``applied`` status)."""

    __slots__ = ("fix", "hook", "how", "methods", "title")

    def __init__(self, fix: str, title: str, methods: tuple[Method, ...], hook: Hook,
                 how: str) -> None:
        self.fix = fix
        self.title = title
        self.methods = methods
        self.hook = hook
        self.how = how


class Decision:
    """A fix's status, and the methods to wrap with what their probe found."""

    __slots__ = ("install", "status")

    def __init__(self, status: FixStatus,
                 install: tuple[tuple[Method, ProbeResult], ...] = ()) -> None:
        self.status = status
        self.install = install

    @property
    def ignored(self) -> tuple[str, ...]:
        """The switches one of the wrapped methods ignores (empty unless ``applied``).

        One plan serves all of a collective's methods; a switch a method already honours is
        harmless to add (sglang goes unregistered there anyway).
        """
        found = {s for _, result in self.install for s in result.ignored}
        return tuple(s for s in Switch.ALL if s in found)


_settled: dict[str, FixStatus] = {}


def settled() -> dict[str, FixStatus]:
    """The statuses of fixes whose decision waited for ``parallel_state``, once decided."""
    return dict(_settled)


def record_settled(status: FixStatus) -> None:
    """Keep a decision that waited for ``parallel_state`` (the caller reports and logs it)."""
    _settled[status.name] = status


def is_hip_platform() -> bool:
    """sglang's own answer (``sglang.srt.utils.is_hip``), asked the way sglang asks it."""
    utils = importlib.import_module("sglang.srt.utils")
    return bool(utils.is_hip())


def _where(version: Version | None) -> str:
    return f"sglang {version}" if version is not None else "this sglang"


def decide(collective: Collective, cls: type, version: Version | None) -> Decision:
    """Probe ``collective``'s methods on ``cls`` (nothing is installed)."""
    where = _where(version)
    found: list[tuple[Method, ProbeResult]] = []
    absent: list[str] = []
    for method in collective.methods:
        qualname = f"GroupCoordinator.{method.name}"
        if method.name not in vars(cls):
            if method.optional:
                absent.append(qualname)
                continue
            return Decision(FixStatus(collective.fix, FixState.SKIPPED,
                                       f"{where} has no {qualname}: no AITER {collective.title} "
                                       "path to fix"))
        params = parameters(cls, method.name)
        if params not in method.signatures:
            known = " or ".join(f"({', '.join(s)})" for s in method.signatures)
            return Decision(FixStatus(collective.fix, FixState.SKIPPED,
                                       f"{where} changed {qualname} to ({', '.join(params)}); the "
                                       f"fix knows {known}, so it leaves sglang unchanged"))
        try:
            result = probe(cls, method.name, method.invoke)
        except NotAiterPath as exc:
            return Decision(FixStatus(collective.fix, FixState.SKIPPED,
                                       f"{where}'s {qualname} never calls aiter's communicator "
                                       f"(it takes {exc}): no AITER {collective.title} path"))
        except ProbeError as exc:
            return Decision(FixStatus(collective.fix, FixState.FAILED,
                                       f"{exc}; sglang unchanged, please report this sglang "
                                       "release"))
        found.append((method, result))
    names = " and ".join(f"GroupCoordinator.{m.name}" for m, _ in found)
    note = f" ({', '.join(absent)}: not in {where})" if absent else ""
    needed = tuple((m, r) for m, r in found if r.ignored)
    if not needed:
        honoured = ", ".join(str(s) for s in found[0][1].honoured) if found else "-"
        verb = "captures" if len(found) == 1 else "capture"
        return Decision(FixStatus(collective.fix, FixState.NOT_NEEDED,
                                   f"{where}'s {names} already {verb} unregistered under: "
                                   f"{honoured}{note}"))
    unsafe = Decision(FixStatus(collective.fix, FixState.APPLIED), needed).ignored
    ignored = ", ".join(str(s) for s in unsafe)
    honoured = ", ".join(str(s) for s in Switch.ALL if s not in unsafe) or "none"
    registers = "registers" if len(found) == 1 else "register"
    return Decision(
        FixStatus(collective.fix, FixState.APPLIED,
                  f"{where}'s {names} {registers} during capture despite {ignored}; "
                  f"{collective.how}; sglang itself honours: {honoured}{note}"),
        install=needed,
    )


def _wrapped(method: Method, hook: Hook, original: Callable[..., Any]) -> Callable[..., Any]:
    return method.wrap(original, hook)


def _decide_and_install(collective: Collective, parallel_state: Any,
                        version: Version | None) -> FixStatus:
    cls = parallel_state.GroupCoordinator
    decision = decide(collective, cls, version)
    for method, _ in decision.install:  # all or nothing: check before wrapping any
        if not isinstance(vars(cls)[method.name], types.FunctionType) and not is_installed(
                cls, method.name):
            return FixStatus(collective.fix, FixState.FAILED,
                             f"GroupCoordinator.{method.name} is "
                             f"{type(vars(cls)[method.name]).__name__}, not a function; sglang "
                             "unchanged, please report this sglang release")
    if decision.install:
        collective.hook.plan = plan_for(decision.ignored, parallel_state.envs)
        for method, _ in decision.install:
            install(cls, method.name, functools.partial(_wrapped, method, collective.hook),
                    collective.fix)
    return decision.status


def on_rocm(name: str, title: str, version: Version | None,
            decide_now: Callable[[Any], FixStatus], module: str = PARALLEL_STATE,
            report: Callable[[FixStatus], None] | None = None) -> FixStatus:
    """Steps 1-2 of the module docstring; ``decide_now(module)`` does step 3.

    ``module``: the sglang module the decision waits for (``parallel_state`` unless given);
    ``report``: where a decision that waited goes (the fix context's ``report``).
    """
    if version is None:
        return FixStatus(name, FixState.SKIPPED, "sglang is not installed")
    if not is_hip_platform():
        return FixStatus(name, FixState.SKIPPED,
                         f"not a ROCm (HIP) platform: sglang never takes an AITER {title} here; "
                         "nothing installed")
    imported = sys.modules.get(module)
    if imported is not None:
        return decide_now(imported)

    def later(loaded: Any) -> None:
        status = decide_now(loaded)
        record_settled(status)
        if report is not None:
            report(status)

    if when_imported(module, later):  # imported meanwhile: decided now
        return _settled[name]
    return FixStatus(name, FixState.PENDING,
                     f"decided when sglang imports {module} (not imported yet in this process; "
                     "every process that runs collectives imports it first)",
                     waiting_for=(module,))


def apply(collective: Collective, version: Version | None,
          report: Callable[[FixStatus], None] | None = None) -> FixStatus:
    """A collective fix's ``aiter_ext_apply_fix``: see the module docstring."""
    return on_rocm(collective.fix, collective.title, version,
                   lambda module: _decide_and_install(collective, module, version),
                   report=report)
