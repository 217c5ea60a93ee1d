"""One fresh process off ROCm that loads the plugin, shared by the tests that read it."""

from __future__ import annotations

import functools
from typing import Any

from testkit.subproc import run_python

__all__ = ["off_rocm_process"]


OFF_ROCM = """
import sys
from sglang.srt.distributed import parallel_state as ps
from sglang.srt.plugins import load_plugins
load_plugins()
imported = sorted(m for m in sys.modules if m.startswith("sglang_aiter_plugin"))
from sglang_aiter_plugin._registration import last_statuses
from sglang_aiter_plugin.fixes.collectives.wrappers import is_installed
print("RESULT " + json.dumps({
    "statuses": {s.name: [s.state.value, s.detail] for s in last_statuses()},
    "wrapped": sorted(n for n in vars(ps.GroupCoordinator) if is_installed(ps.GroupCoordinator, n)),
    "imported": imported,
}))
"""


@functools.cache
def off_rocm_process() -> Any:
    """One fresh process off ROCm, run once per test session: it imports ``parallel_state`` (as
    a launcher has) and runs sglang's ``load_plugins()`` with ``attention-backend`` listed in
    ``SGLANG_AITER_EXT_DISABLE``. Returns the statuses (name -> [state, detail]), the
    ``GroupCoordinator`` members carrying a collective fix's wrapper and the plugin's modules it
    imported."""
    return run_python(OFF_ROCM, env={"SGLANG_AITER_EXT_DISABLE": "attention-backend"}).data
