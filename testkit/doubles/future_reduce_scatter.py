"""Doubles of ``GroupCoordinator._maybe_aiter_reduce_scatter`` as a future sglang might write it.

No released sglang honours every switch the ``reduce-scatter-tms`` fix adds, so the fix's
``not needed`` path and its refusal of a changed signature can only be exercised with a stand-in
for that one method. Each reads the module-level names sglang's method reads (``is_hip``,
``envs``, ``torch``, ``is_in_tc_piecewise_cuda_graph``, ``_AITER_CAPTURE_COPY_IN``): the names
the fix's behaviour probe substitutes.
"""

from __future__ import annotations

import os
from typing import Any

import torch

__all__ = ["honouring_every_switch", "with_an_extra_parameter"]

_AITER_CAPTURE_COPY_IN = os.environ.get("SGLANG_AITER_CAPTURE_COPY_IN", "0") == "1"


def is_hip() -> bool:
    return False


def is_in_tc_piecewise_cuda_graph() -> bool:
    return False


class _Envs:
    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)


envs: Any = _Envs()


def honouring_every_switch(self: Any, output: Any, input: Any) -> bool:
    """Registers during capture only when TMS, copy-in and the communicator all allow it."""
    if not is_hip() or not envs.SGLANG_DP_USE_REDUCE_SCATTER.get():
        return False
    comm = self.ca_comm
    if comm is None or comm.disabled or not comm.should_custom_ar(input):
        return False
    if comm._IS_CAPTURING:
        if torch.cuda.is_current_stream_capturing():
            allowed = getattr(comm, "enable_register_for_capturing", True)
            tms = envs.SGLANG_MEMORY_SAVER_CUDA_GRAPH.get()
            comm.reduce_scatter(
                input, output, registered=bool(allowed and not tms and not _AITER_CAPTURE_COPY_IN)
            )
        elif is_in_tc_piecewise_cuda_graph():
            comm.reduce_scatter(input, output, registered=False)
        else:
            output.zero_()
        return True
    comm.reduce_scatter(input, output, registered=False)
    return True


def with_an_extra_parameter(self: Any, output: Any, input: Any, dim: int = 0) -> bool:
    """Same behaviour, new signature: the fix's hook could not pass ``dim`` on."""
    return honouring_every_switch(self, output, input)
