"""Each collective fix's verdict for the installed sglang as on a ROCm host, with nothing installed.

The fixes decide by probing (the probes simulate the ROCm host themselves), so the verdict a ROCm
process would log can be computed on any machine: the compatibility matrix and the tripwire
tests read it here. ``python -m testkit.collective_verdicts`` prints it as JSON, with the
all-reduce tripwire's (``not needed`` where sglang's all-reduce honours TMS and the communicator
flag itself, :mod:`.all_reduce_capture`).
"""

from __future__ import annotations

import importlib
import json
import sys

from sglang_aiter_plugin._sglang import installed_sglang_version
from sglang_aiter_plugin._status import FixState
from sglang_aiter_plugin.fixes.collectives import registered
from sglang_aiter_plugin.fixes.collectives.fix import PARALLEL_STATE, Decision
from sglang_aiter_plugin.fixes.collectives.probe import Condition
from testkit.all_reduce_capture import registering

__all__ = ["LABELS", "all_reduce", "short", "verdicts"]

LABELS = {Condition.TMS: "TMS", Condition.COPY_IN: "copy-in", Condition.COMM_FLAG: "flag",
          Condition.REPLAY: "replay"}


def short(decision: Decision) -> str:
    """A table cell: ``applied (TMS, copy-in, flag, replay)``, ``not needed``, ``skipped``."""
    if decision.status.state is not FixState.APPLIED:
        return str(decision.status.state)
    return f"applied ({', '.join(LABELS[c] for c in decision.ignored)})"


def verdicts() -> dict[str, Decision]:
    """Fix name -> what a ROCm process with this sglang would decide (nothing installed)."""
    version = installed_sglang_version()
    coordinator = importlib.import_module(PARALLEL_STATE).GroupCoordinator
    return {fix.name: fix.decide(coordinator, version) for fix in registered()}


def all_reduce() -> dict[str, str]:
    """The all-reduce tripwire's verdict: ``not needed`` (sglang honours TMS and the
    communicator flag), or where it registers despite one."""
    try:
        found = registering()
    except Exception as exc:
        return {"state": "probe failed", "short": "probe failed",
                "detail": f"{type(exc).__name__}: {exc}"}
    if found:
        return {"state": "registers", "short": "registers", "detail": "; ".join(found)}
    return {"state": "not needed", "short": "not needed",
            "detail": "sglang captures all-reduce unregistered under TMS and the communicator flag"}


if __name__ == "__main__":
    sys.modules.setdefault("aiter", None)  # type: ignore[arg-type]  # no ROCm needed
    found = {name: {"state": d.status.state.value, "short": short(d), "detail": d.status.detail}
             for name, d in verdicts().items()}
    print(json.dumps({"all-reduce": all_reduce(), **found}, indent=2))
