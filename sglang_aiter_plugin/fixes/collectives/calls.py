"""The canary: every call sglang's ``GroupCoordinator`` makes on aiter's communicator, read from
its source (each ``ca_comm.<name>(...)`` site), and whether the plugin knows it.

A call is known when it registers nothing during a capture (a gate or the capture context,
:data:`.probe.NO_COLLECTIVE`; ``False`` in :data:`.probe.AITER_CALLS`, or ``registered=False``
passed as such), when aiter's communicator has no such method (:data:`NOT_AITERS`), or when a
collective fix probes the method and has the call's unregistered form (sglang's all-reduce
among them). Any other call may register the caller's tensors during a
capture with nothing to take it off that path: ``doctor`` warns with its site.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from typing import NamedTuple

from sglang_aiter_plugin._errors import AiterExtError
from sglang_aiter_plugin.fixes.collectives.fix import CollectiveFix
from sglang_aiter_plugin.fixes.collectives.probe import AITER_CALLS, NO_COLLECTIVE
from sglang_aiter_plugin.fixes.collectives.wrappers import UNREGISTERED

__all__ = ["NOT_AITERS", "CommunicatorCall", "NoGroupCoordinatorError",
           "communicator_calls", "known_as"]


class NoGroupCoordinatorError(AiterExtError, LookupError):
    """The source read holds no ``GroupCoordinator`` class."""


NOT_AITERS = ("fused_allreduce_rmsnorm",)
"""What sglang calls on ``ca_comm`` that aiter's communicator (ROCm/aiter e4048607) does not
define (sglang asks ``hasattr`` first: a communicator-native fused API)."""


class CommunicatorCall(NamedTuple):
    """One site: the ``GroupCoordinator`` method, the name it calls, its line, and the
    ``registered=`` it passes where that is a literal (else ``None``)."""

    method: str
    name: str
    line: int
    registered: bool | None = None


def _is_communicator(node: ast.expr, aliases: set[str]) -> bool:
    """``self.ca_comm``, or a local name bound to it."""
    if isinstance(node, ast.Name):
        return node.id in aliases
    return (isinstance(node, ast.Attribute) and node.attr == "ca_comm"
            and isinstance(node.value, ast.Name) and node.value.id == "self")


def communicator_calls(source: str) -> list[CommunicatorCall]:
    """Every call on ``ca_comm`` in ``source``'s ``GroupCoordinator`` methods, in source order
    (``LookupError`` if ``source`` defines no ``GroupCoordinator``)."""
    classes = [node for node in ast.parse(source).body
               if isinstance(node, ast.ClassDef) and node.name == "GroupCoordinator"]
    if not classes:
        raise NoGroupCoordinatorError("no class GroupCoordinator in this source")
    found = []
    for method in classes[0].body:
        if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        nodes = list(ast.walk(method))
        aliases = {target.id for node in nodes if isinstance(node, (ast.Assign, ast.NamedExpr))
                   and _is_communicator(node.value, set())
                   for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
                   if isinstance(target, ast.Name)}
        for node in nodes:
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and _is_communicator(node.func.value, aliases)):
                given = next((k.value for k in node.keywords if k.arg == "registered"), None)
                literal = given.value if isinstance(given, ast.Constant) else None
                found.append(CommunicatorCall(method.name, node.func.attr, node.lineno,
                                              literal if isinstance(literal, bool) else None))
    return sorted(found, key=lambda call: call.line)


def known_as(call: CommunicatorCall, fixes: Iterable[CollectiveFix]) -> str | None:
    """Why the plugin knows ``call`` (the module doc), or ``None`` where it does not."""
    aiter = AITER_CALLS.get(call.name)
    if call.name in NO_COLLECTIVE:
        return "runs no collective"
    if aiter is not None and (aiter.registers is False
                              or (aiter.registers == "given" and call.registered is False)):
        return "registers nothing during a capture"
    if call.name in NOT_AITERS:
        return "not a method of aiter's communicator"
    for fix in fixes:
        if call.name in UNREGISTERED and call.method in {m.name for m in fix.methods}:
            return f"probed by {fix.name}, which has its unregistered form"
    return None
