"""Doubles of ``GroupCoordinator`` collective methods as a future sglang might write them.

No released sglang honours every switch the collective fixes add, so the fixes' ``not needed``
path and their refusal of a changed signature can only be exercised with stand-ins for those
methods. Each reads the module-level names sglang's methods read (``is_hip``, ``envs``,
``torch``, ``is_in_tc_piecewise_cuda_graph``, ``_AITER_CAPTURE_COPY_IN``): the names the fixes'
probes substitute (so each function spells its checks out itself). The capture decision is the
rule the fixes apply: unregistered under TMS, copy-in, or a communicator whose
``enable_register_for_capturing`` is ``False``.
"""

from __future__ import annotations

import os
from typing import Any

import torch

__all__ = ["all_gather_honouring_every_switch", "fused_honouring_every_switch",
           "quant_honouring_every_switch", "reduce_scatter_honouring_every_switch",
           "with_an_extra_parameter"]

_AITER_CAPTURE_COPY_IN = os.environ.get("SGLANG_AITER_CAPTURE_COPY_IN", "0") == "1"


def is_hip() -> bool:
    return False


def is_in_tc_piecewise_cuda_graph() -> bool:
    return False


class _Envs:
    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)


envs: Any = _Envs()


def reduce_scatter_honouring_every_switch(self: Any, output: Any, input: Any) -> bool:
    if not is_hip() or not envs.SGLANG_DP_USE_REDUCE_SCATTER.get():
        return False
    comm = self.ca_comm
    if comm is None or comm.disabled or not comm.should_custom_ar(input):
        return False
    if comm._IS_CAPTURING:
        if torch.cuda.is_current_stream_capturing():
            may = bool(getattr(comm, "enable_register_for_capturing", True)
                          and not envs.SGLANG_MEMORY_SAVER_CUDA_GRAPH.get()
                          and not _AITER_CAPTURE_COPY_IN)
            comm.reduce_scatter(input, output, registered=may)
        elif is_in_tc_piecewise_cuda_graph():
            comm.reduce_scatter(input, output, registered=False)
        else:
            output.zero_()
        return True
    comm.reduce_scatter(input, output, registered=False)
    return True


def all_gather_honouring_every_switch(self: Any, output: Any, input: Any) -> None:
    comm = self.ca_comm
    if not is_hip() or comm is None or comm.disabled:
        raise NotImplementedError("the double has only the AITER path")
    may = bool(getattr(comm, "enable_register_for_capturing", True)
               and not envs.SGLANG_MEMORY_SAVER_CUDA_GRAPH.get()
               and not _AITER_CAPTURE_COPY_IN)
    if comm._IS_CAPTURING and torch.cuda.is_current_stream_capturing() and may:
        comm.all_gather_reg(input, out=output, dim=0)
    else:
        comm.all_gather_unreg(input, out=output, dim=0)


def fused_honouring_every_switch(self: Any, input_: Any, residual_inp_: Any, weight_: Any,
                                 eps: float) -> Any:
    comm = self.ca_comm
    if comm is None or getattr(comm, "disabled", True):
        return None
    capturing = comm._IS_CAPTURING and torch.cuda.is_current_stream_capturing()
    may = bool(getattr(comm, "enable_register_for_capturing", True)
               and not envs.SGLANG_MEMORY_SAVER_CUDA_GRAPH.get()
               and not _AITER_CAPTURE_COPY_IN)
    return comm.fused_ar_rms(input_, residual_inp_, w=weight_, eps=eps,
                             registered=bool(capturing and may))


def quant_honouring_every_switch(self: Any, input_: Any, residual_inp_: Any, weight_: Any,
                                 eps: float, group_size: int = 128, emit_bf16: bool = False,
                                 transpose_scale: bool = False) -> Any:
    comm = self.ca_comm
    if not is_hip() or comm is None or getattr(comm, "disabled", True):
        return None
    capturing = comm._IS_CAPTURING and torch.cuda.is_current_stream_capturing()
    may = bool(getattr(comm, "enable_register_for_capturing", True)
               and not envs.SGLANG_MEMORY_SAVER_CUDA_GRAPH.get()
               and not _AITER_CAPTURE_COPY_IN)
    return comm.fused_ar_rms_per_group_quant(input_, residual_inp_, w=weight_, eps=eps,
                                             group_size=group_size,
                                             registered=bool(capturing and may))


def with_an_extra_parameter(self: Any, output: Any, input: Any, dim: int = 0) -> bool:
    """Same behaviour, new signature: a wrapper written for (self, output, input) must refuse it."""
    return reduce_scatter_honouring_every_switch(self, output, input)
