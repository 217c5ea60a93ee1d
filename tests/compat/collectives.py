"""The compatibility matrix's collective columns: each collective fix's verdict for one release.

The verdict is what a ROCm process with that release would report (the fixes probe as on ROCm,
so this runs anywhere): ``applied (TMS, copy-in, flag, replay)`` names the conditions the plugin
adds (``replay``: ranks that may replay different graphs), ``not needed``, ``skipped`` (no AITER
path in that release), ``failed``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from sglang_aiter_plugin.fixes.collectives import (
    ALL_GATHER,
    ALL_REDUCE,
    FUSED_AR_RMSNORM,
    REDUCE_SCATTER,
)

__all__ = ["COLUMNS", "collective_verdicts"]

ROOT = Path(__file__).resolve().parents[2]
#: fix name (as its ledger entry writes it) -> matrix column
COLUMNS = {
    ALL_REDUCE.name: "all-reduce verdict",
    ALL_GATHER.name: "all-gather verdict",
    REDUCE_SCATTER.name: "reduce-scatter verdict",
    FUSED_AR_RMSNORM.name: "fused AR+RMSNorm verdict",
}


def collective_verdicts(version: str) -> dict[str, str]:
    """Column -> verdict for sglang ``version`` (installed beside the base one if needed)."""
    cmd = ["bash", str(ROOT / "tools" / "with-sglang"), version, sys.executable, "-m",
           "testkit.collective_verdicts"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    try:
        found = json.loads(proc.stdout)
        return {column: found[fix]["short"] for fix, column in COLUMNS.items()}
    except Exception:
        return dict.fromkeys(COLUMNS.values(), "probe failed")
