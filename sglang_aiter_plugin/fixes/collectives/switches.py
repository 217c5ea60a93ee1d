"""The switches under which a capture must not register the caller's tensors, and the hook's plan.

Three conditions make registration during a full CUDA-graph capture unsafe:

* ``SGLANG_MEMORY_SAVER_CUDA_GRAPH=1`` (torch_memory_saver owns the graph pool; its memory cannot
  be IPC-exported);
* ``SGLANG_AITER_CAPTURE_COPY_IN=1`` (sglang's own request to stage through aiter's
  pre-registered buffer; 0.5.22+ reads it once, at import of ``parallel_state``);
* the communicator's ``enable_register_for_capturing`` is ``False`` (aiter turns it off for
  PyTorch expandable segments and gfx1250; a communicator without the attribute allows it).

A :class:`Plan` holds only the switches the installed sglang ignores for one collective; the
switches sglang honours stay sglang's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

__all__ = ["COPY_IN_ENV", "TMS_ENV", "Plan", "Switch", "plan_for"]

TMS_ENV = "SGLANG_MEMORY_SAVER_CUDA_GRAPH"
COPY_IN_ENV = "SGLANG_AITER_CAPTURE_COPY_IN"


class Switch:
    """The conditions under which the capture must not register the caller's tensors.

    Each is a string, its own label in statuses; :attr:`ALL` lists them in order. (Constants, not
    an enum: this module loads in every ROCm process at start-up, where creating an enum class
    costs about as much as the rest of the module.)
    """

    TMS = f"{TMS_ENV}=1"
    COPY_IN = f"{COPY_IN_ENV}=1"
    COMM_FLAG = "communicator enable_register_for_capturing=False"
    ALL: tuple[str, ...] = (TMS, COPY_IN, COMM_FLAG)


class Plan:
    """What a hook checks during a stream capture: only the switches sglang ignores.

    ``copy_in``: ``SGLANG_AITER_CAPTURE_COPY_IN=1`` at start-up, and sglang ignores it;
    ``tms_switch``: sglang's ``envs.SGLANG_MEMORY_SAVER_CUDA_GRAPH`` when sglang ignores it,
    else ``None``; ``honour_comm_flag``: sglang ignores the communicator's flag. (A plain class:
    it is built at start-up in every ROCm process, where a dataclass costs its creation time.)
    """

    __slots__ = ("copy_in", "honour_comm_flag", "ignored", "tms_switch")

    def __init__(self, ignored: tuple[str, ...], copy_in: bool = False,
                 tms_switch: Any = None, honour_comm_flag: bool = False) -> None:
        self.ignored = ignored
        self.copy_in = copy_in
        self.tms_switch = tms_switch
        self.honour_comm_flag = honour_comm_flag

    def unregistered(self, communicator: Any) -> bool:
        """Whether this capture must not register the caller's tensors."""
        if self.copy_in:
            return True
        if self.honour_comm_flag and not getattr(
            communicator, "enable_register_for_capturing", True
        ):
            return True
        return self.tms_switch is not None and bool(self.tms_switch.get())


def plan_for(ignored: tuple[str, ...], envs: Any,
             environ: Mapping[str, str] | None = None) -> Plan:
    """The plan for the switches the installed sglang ignores (``envs``: sglang's ``envs``).

    Copy-in follows sglang's own rule (exactly ``"1"``) and, like sglang, is read once.
    """
    env = os.environ if environ is None else environ
    return Plan(
        ignored=ignored,
        copy_in=Switch.COPY_IN in ignored and env.get(COPY_IN_ENV, "0") == "1",
        tms_switch=getattr(envs, TMS_ENV) if Switch.TMS in ignored else None,
        honour_comm_flag=Switch.COMM_FLAG in ignored,
    )
