"""How the all-reduce fix decides: only the conditions sglang's all-reduce leaves to the plugin.

sglang hands a capture's all-reduce to aiter's ``custom_all_reduce``, which follows the
communicator's ``enable_register_for_capturing``; sglang builds aiter's communicator with that off
under torch_memory_saver, and its own ROCm communicator captures with ``registered=not
tms_cudagraph``. So TMS and the communicator flag are sglang's (the tripwire tests check both on
every release). Left to the plugin: the group's ranks replaying different graphs (where sglang
captures graph variants) and copy-in, which sglang's all-reduce never reads; copy-in counts only
where it is requested (``SGLANG_AITER_CAPTURE_COPY_IN=1`` at start-up), so a release without
graph variants says ``not needed`` unless the user asked for copy-in.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from sglang_aiter_plugin.fixes.collectives.fix import CollectiveFix

if TYPE_CHECKING:
    from sglang_aiter_plugin.fixes.collectives.probe import Condition, ProbeResult

__all__ = ["AllReduceFix"]


class AllReduceFix(CollectiveFix):
    """A :class:`CollectiveFix` that takes on copy-in (where requested) and the ranks replaying
    different graphs only."""

    def counted(self, result: ProbeResult, variants: bool) -> tuple[Condition, ...]:
        from sglang_aiter_plugin.fixes.collectives.probe import COPY_IN_ENV, Condition

        copy_in = (Condition.COPY_IN in result.ignored
                   and os.environ.get(COPY_IN_ENV, "0") == "1")
        return tuple(c for c, on in ((Condition.COPY_IN, copy_in), (Condition.REPLAY, variants))
                     if on)

    def honoured(self, found: list[tuple[str, ProbeResult]]) -> str:
        from sglang_aiter_plugin.fixes.collectives.probe import Condition

        return f"{Condition.TMS} (the communicator it builds), {Condition.COMM_FLAG}"

    def not_needed(self, release: str, names: str, found: list[tuple[str, ProbeResult]],
                   variants: str) -> str:
        from sglang_aiter_plugin.fixes.collectives.probe import COPY_IN_ENV, TMS_ENV

        copy_in = ("sglang's all-reduce honours it" if os.environ.get(COPY_IN_ENV, "0") == "1"
                   else "not set")
        return (f"{variants}; {COPY_IN_ENV}: {copy_in}; {release}'s {names} captures through "
                f"aiter's custom_all_reduce, which follows the communicator flag (sglang turns it "
                f"off under {TMS_ENV}=1)")
