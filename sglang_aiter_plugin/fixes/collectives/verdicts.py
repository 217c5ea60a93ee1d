"""Each collective fix's verdict for the installed sglang as on a ROCm host, with nothing installed.

The fixes decide by probing (the probes simulate the ROCm host themselves), so the verdict a ROCm
process would log can be computed on any machine: the compatibility matrix and the tripwire
tests read it here. ``python -m sglang_aiter_plugin.fixes.collectives.verdicts`` prints it as
JSON.
"""

from __future__ import annotations

import importlib
import json
import sys
from dataclasses import dataclass

from sglang_aiter_plugin._sglang import installed_sglang_version
from sglang_aiter_plugin._status import FixState, FixStatus
from sglang_aiter_plugin.fixes.collectives import all_reduce
from sglang_aiter_plugin.fixes.collectives.all_gather import COLLECTIVE as ALL_GATHER
from sglang_aiter_plugin.fixes.collectives.fix import PARALLEL_STATE, decide
from sglang_aiter_plugin.fixes.collectives.fused_ar_rmsnorm import COLLECTIVE as FUSED
from sglang_aiter_plugin.fixes.collectives.reduce_scatter import COLLECTIVE as REDUCE_SCATTER
from sglang_aiter_plugin.fixes.collectives.switches import Switch

__all__ = ["LABELS", "Verdict", "verdicts"]

LABELS = {Switch.TMS: "TMS", Switch.COPY_IN: "copy-in", Switch.COMM_FLAG: "flag"}


@dataclass(frozen=True)
class Verdict:
    status: FixStatus
    ignored: tuple[str, ...]
    """The switches sglang ignores, which the fix adds (empty unless ``applied``)."""

    @property
    def short(self) -> str:
        """A table cell: ``applied (TMS, copy-in, flag)``, ``not needed``, ``skipped``."""
        if self.status.state is not FixState.APPLIED:
            return str(self.status.state)
        return f"applied ({', '.join(LABELS[s] for s in self.ignored)})"


def verdicts() -> dict[str, Verdict]:
    """Fix name -> what a ROCm process with this sglang would report (nothing installed)."""
    version = installed_sglang_version()
    parallel_state = importlib.import_module(PARALLEL_STATE)
    coordinator = parallel_state.GroupCoordinator
    car = importlib.import_module(all_reduce.CUSTOM_ALL_REDUCE)
    found = {all_reduce.NAME: Verdict(all_reduce.decide(coordinator, car, version), ())}
    for collective in (ALL_GATHER, REDUCE_SCATTER, FUSED):
        decision = decide(collective, coordinator, version)
        found[collective.fix] = Verdict(decision.status, decision.ignored)
    return found


if __name__ == "__main__":
    sys.modules.setdefault("aiter", None)  # type: ignore[arg-type]  # no ROCm needed
    print(json.dumps({name: {"state": v.status.state.value, "short": v.short,
                             "detail": v.status.detail} for name, v in verdicts().items()},
                     indent=2))
