"""Double of aiter's ``CustomAllreduce`` for CPU tests: records every ``reduce_scatter`` call.

It carries exactly the attributes sglang's reduce-scatter path reads (``disabled``,
``_IS_CAPTURING``, ``should_custom_ar``, ``reduce_scatter``) and, unless told otherwise, aiter's
``enable_register_for_capturing`` flag. ``register_flag=None`` leaves the attribute out, as an
aiter release without it would.
"""

from __future__ import annotations

from typing import Any

__all__ = ["MARK", "RecordingCommunicator"]

MARK = 7.0
"""What ``reduce_scatter`` writes into the output, so a test can tell it from warm-up zeros."""


class RecordingCommunicator:
    def __init__(self, *, capturing: bool, register_flag: bool | None = True) -> None:
        self.disabled = False
        self._IS_CAPTURING = capturing
        if register_flag is not None:
            self.enable_register_for_capturing = register_flag
        self.calls: list[dict[str, Any]] = []

    def should_custom_ar(self, inp: Any) -> bool:
        return True

    def reduce_scatter(self, inp: Any, out: Any, dim: int = 0, *, registered: bool = False) -> None:
        self.calls.append({"registered": registered, "dim": dim})
        out.fill_(MARK)

    @property
    def registered(self) -> list[bool]:
        return [call["registered"] for call in self.calls]
