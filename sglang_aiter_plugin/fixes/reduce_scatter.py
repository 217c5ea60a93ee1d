"""Fix ``reduce-scatter-tms`` (placeholder until the reduce-scatter fix lands)."""

from __future__ import annotations

from sglang_aiter_plugin._status import FixState, FixStatus
from sglang_aiter_plugin.plugin import hookimpl
from sglang_aiter_plugin.plugin.spec import FixContext

NAME = "reduce-scatter-tms"


@hookimpl
def aiter_ext_apply_fix(context: FixContext) -> FixStatus:
    return FixStatus(NAME, FixState.SKIPPED, "not implemented in this build")
