"""Each collective fix's verdict for the installed sglang as on a ROCm host, with nothing installed.

The fixes decide by probing (the probes simulate the ROCm host themselves), so the verdict a ROCm
process would log can be computed on any machine: the compatibility matrix and the tripwire
tests read it here. ``python -m testkit.collective_verdicts`` prints it as JSON.
"""

from __future__ import annotations

import importlib
import json
import sys

from sglang_aiter_plugin._sglang import installed_sglang_version
from sglang_aiter_plugin._status import FixState
from sglang_aiter_plugin.fixes.collectives import (
    ALL_GATHER,
    ALL_REDUCE,
    FUSED_AR_RMSNORM,
    REDUCE_SCATTER,
)
from sglang_aiter_plugin.fixes.collectives.fix import CUSTOM_ALL_REDUCE, PARALLEL_STATE, Decision
from sglang_aiter_plugin.fixes.collectives.probe import Condition

__all__ = ["LABELS", "short", "verdicts"]

LABELS = {Condition.TMS: "TMS", Condition.COPY_IN: "copy-in", Condition.COMM_FLAG: "flag"}


def short(decision: Decision) -> str:
    """A table cell: ``applied (TMS, copy-in, flag)``, ``not needed``, ``skipped``."""
    if decision.status.state is not FixState.APPLIED:
        return str(decision.status.state)
    return f"applied ({', '.join(LABELS[c] for c in decision.ignored)})"


def verdicts() -> dict[str, Decision]:
    """Fix name -> what a ROCm process with this sglang would decide (nothing installed)."""
    version = installed_sglang_version()
    coordinator = importlib.import_module(PARALLEL_STATE).GroupCoordinator
    car = importlib.import_module(CUSTOM_ALL_REDUCE)
    found = {ALL_REDUCE.name: ALL_REDUCE.decide(coordinator, car, version)}
    for fix in (ALL_GATHER, REDUCE_SCATTER, FUSED_AR_RMSNORM):
        found[fix.name] = fix.decide(coordinator, version)
    return found


if __name__ == "__main__":
    sys.modules.setdefault("aiter", None)  # type: ignore[arg-type]  # no ROCm needed
    print(json.dumps({name: {"state": d.status.state.value, "short": short(d),
                             "detail": d.status.detail} for name, d in verdicts().items()},
                     indent=2))
