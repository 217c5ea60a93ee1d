"""Doubles of ``GroupCoordinator`` collective methods as a future sglang might write them.

No released sglang honours every switch the collective fixes add, calls aiter's further fused
collectives (ROCm/aiter e4048607: ``custom_fused_ar_rms_quant``, ``..._mxfp4_quant``,
``custom_fused_qknorm_ar[_rope]``) or the output aiter allocates, so the fixes' ``not needed``
path, their refusal of a changed signature or of a call they cannot take off the registered
path, and what they do with those calls can only be exercised with stand-ins for those
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

__all__ = ["all_gather_honouring_every_switch", "all_gather_into_aiters_output",
           "all_gather_through_custom_all_gather", "fused_always_registered",
           "fused_calling_mxfp4_quant",
           "fused_calling_per_token_quant", "fused_honouring_every_switch", "qknorm_allreduce",
           "qknorm_rope_allreduce", "quant_honouring_every_switch",
           "reduce_scatter_honouring_every_switch", "with_an_extra_parameter"]

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


def fused_calling_per_token_quant(self: Any, input_: Any, residual_inp_: Any, weight_: Any,
                                  eps: float) -> Any:
    """``fused_allreduce_rmsnorm`` fused with aiter's per-token FP8 quant, called as 0.5.23 calls
    ``custom_fused_ar_rms`` (which registers during a capture)."""
    comm = self.ca_comm
    if comm is None or getattr(comm, "disabled", True):
        return None
    if not hasattr(comm, "custom_fused_ar_rms_quant"):
        return None
    return comm.custom_fused_ar_rms_quant(input_, residual_inp_, weight_, eps, True)


def fused_calling_mxfp4_quant(self: Any, input_: Any, residual_inp_: Any, weight_: Any,
                              eps: float) -> Any:
    """``fused_allreduce_rmsnorm`` fused with aiter's MXFP4 quant, called the same way."""
    comm = self.ca_comm
    if comm is None or getattr(comm, "disabled", True):
        return None
    if not hasattr(comm, "custom_fused_ar_rms_mxfp4_quant"):
        return None
    return comm.custom_fused_ar_rms_mxfp4_quant(input_, residual_inp_, weight_, eps)


def qknorm_allreduce(self: Any, qkv: Any, q_w: Any, k_w: Any, eps: float) -> Any:
    """A new method: the all-reduce fused with the q/k RMSNorm (aiter's
    ``custom_fused_qknorm_ar``)."""
    comm = self.ca_comm
    if comm is None or getattr(comm, "disabled", True):
        return None
    return comm.custom_fused_qknorm_ar(qkv, q_w, k_w, eps)


def qknorm_rope_allreduce(self: Any, qkv: Any, q_w: Any, k_w: Any, cos_sin_cache: Any,
                          positions: Any, head_dim: int, rotary_dim: int, eps: float) -> Any:
    """The same with rotary embedding (aiter's ``custom_fused_qknorm_ar_rope``)."""
    comm = self.ca_comm
    if comm is None or getattr(comm, "disabled", True):
        return None
    return comm.custom_fused_qknorm_ar_rope(qkv, q_w, k_w, cos_sin_cache, positions, head_dim,
                                            rotary_dim, eps)


def all_gather_through_custom_all_gather(self: Any, output: Any, input: Any) -> None:
    """The all-gather through aiter's own ``custom_all_gather``, which registers during a
    capture per the communicator flag only (no unregistered form the plugin could hand it)."""
    comm = self.ca_comm
    if not is_hip() or comm is None or comm.disabled:
        raise NotImplementedError("the double has only the AITER path")
    output.copy_(comm.custom_all_gather(input, dim=0))


def all_gather_into_aiters_output(self: Any, output: Any, input: Any) -> None:
    """0.5.15's all-gather, except that it copies from the output aiter allocates (no ``out=``)."""
    comm = self.ca_comm
    if not is_hip() or comm is None or comm.disabled:
        raise NotImplementedError("the double has only the AITER path")
    if (comm._IS_CAPTURING and torch.cuda.is_current_stream_capturing()
            and not envs.SGLANG_MEMORY_SAVER_CUDA_GRAPH.get()):
        output.copy_(comm.all_gather_reg(input, dim=0))
    else:
        output.copy_(comm.all_gather_unreg(input, dim=0))


def fused_always_registered(self: Any, input_: Any, residual_inp_: Any, weight_: Any,
                            eps: float) -> Any:
    """A fused all-reduce that hands aiter's ``fused_ar_rms`` ``registered=True`` during a
    capture, whatever the switches or the communicator flag say."""
    comm = self.ca_comm
    if comm is None or getattr(comm, "disabled", True):
        return None
    capturing = comm._IS_CAPTURING and torch.cuda.is_current_stream_capturing()
    return comm.fused_ar_rms(input_, residual_inp_, w=weight_, eps=eps, registered=capturing)
