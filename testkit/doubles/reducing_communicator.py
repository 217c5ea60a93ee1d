"""Double of aiter's ``CustomAllreduce`` for the GPU tier: real collectives on the current stream.

It follows aiter's memory contract (``aiter/dist/device_communicators/custom_all_reduce.py``):

* unregistered calls (``registered=False``, ``all_gather_unreg``) first copy the input into the
  communicator's own buffer (aiter's pre-registered IPC buffer) and read that;
* registered calls (``registered=True``, ``all_gather_reg``) read the caller's input directly;
  during stream capture the pointer is recorded, and when :meth:`capture` ends each recorded
  pointer is IPC-exported (``cuIpcGetMemHandle``): the step that fails on memory that cannot be
  exported;
* ``custom_all_reduce`` follows ``enable_register_for_capturing`` during capture;
  ``custom_fused_ar_rms`` and ``custom_fused_ar_rms_per_group_quant`` register during capture
  whatever the switches, and return zeros in warm-up (capture mode, stream not capturing).

The collectives are real: with a ``torch.distributed`` group they run on that group (NCCL);
without one, ``world_size`` ranks are virtual, rank ``k`` holding ``(k + 1)`` times this rank's
input (this process is rank 0). The fused all-reduce + RMSNorm returns
``(rmsnorm(allreduce(x) + residual) * w, allreduce(x) + residual)``; its per-group-quant form
quantises the normed output to float8 (e4m3) with one scale per group of ``group_size``.
:class:`ReducingCommunicator` has the unregistered fused forms (``fused_ar_rms``,
``fused_ar_rms_per_group_quant``); :class:`ReducingCommunicatorWithoutUnregisteredFused` lacks
them, as an older aiter would.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

__all__ = ["FP8_MAX", "ReducingCommunicator", "ReducingCommunicatorWithoutUnregisteredFused",
           "fused_reference", "ipc_export_result", "quant_reference"]

FP8_MAX = 448.0


def ipc_export_result(pointer: int) -> int:
    """``cuIpcGetMemHandle`` on ``pointer``: 0 when the memory can be IPC-exported."""
    libcuda = ctypes.CDLL("libcuda.so.1")
    handle = (ctypes.c_byte * 64)()
    return int(libcuda.cuIpcGetMemHandle(ctypes.byref(handle), ctypes.c_uint64(pointer)))


def fused_reference(reduced: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
                    eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(rmsnorm(reduced + residual) * w, reduced + residual)``."""
    res_out = reduced + residual
    variance = res_out.pow(2).mean(-1, keepdim=True)
    return res_out * torch.rsqrt(variance + eps) * w, res_out


def quant_reference(normed: torch.Tensor, group_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """float8 e4m3 values and one float32 scale per group of ``group_size`` along the last dim."""
    groups = normed.reshape(*normed.shape[:-1], -1, group_size)
    scale = groups.abs().amax(-1, keepdim=True).clamp(min=1e-12) / FP8_MAX
    q = (groups / scale).to(torch.float8_e4m3fn)
    return q.reshape(normed.shape), scale.squeeze(-1)


class ReducingCommunicatorWithoutUnregisteredFused:
    def __init__(self, *, world_size: int, rank: int, max_elements: int,
                 register_flag: bool | None = True, group: Any = None,
                 device: torch.device | None = None) -> None:
        self.disabled = False
        self._IS_CAPTURING = False
        if register_flag is not None:
            self.enable_register_for_capturing = register_flag
        self.world_size = world_size
        self.rank = rank
        self.group = group
        self._buffer = torch.empty(max_elements, dtype=torch.float32, device=device)
        self.calls: list[tuple[str, bool]] = []
        self.pending_exports: list[int] = []
        self.export_results: list[tuple[int, int]] = []

    # -- capture and the registered/unregistered contract ---------------------------------
    @contextmanager
    def capture(self) -> Iterator[None]:
        self._IS_CAPTURING = True
        try:
            yield
        finally:
            self._IS_CAPTURING = False
            for pointer in self.pending_exports:
                self.export_results.append((pointer, ipc_export_result(pointer)))
            self.pending_exports.clear()

    def _source(self, method: str, inp: torch.Tensor, registered: bool) -> torch.Tensor:
        self.calls.append((method, registered))
        if registered:
            if torch.cuda.is_current_stream_capturing():
                self.pending_exports.append(inp.data_ptr())
            return inp
        staged = self._buffer[: inp.numel()].view_as(inp)
        staged.copy_(inp)
        return staged

    def _flag(self) -> bool:
        return bool(getattr(self, "enable_register_for_capturing", True))

    def should_custom_ar(self, inp: torch.Tensor, *args: Any, **kwargs: Any) -> bool:
        return inp.numel() <= self._buffer.numel()

    def should_custom_ag(self, inp: torch.Tensor) -> bool:
        return inp.numel() * self.world_size <= self._buffer.numel()

    # -- the collectives ------------------------------------------------------------------
    def _all_reduce(self, source: torch.Tensor) -> torch.Tensor:
        if self.group is not None:
            out = source.clone()
            torch.distributed.all_reduce(out, group=self.group)
            return out
        return source * (self.world_size * (self.world_size + 1) / 2)

    def custom_all_reduce(self, inp: torch.Tensor) -> torch.Tensor:
        if self._IS_CAPTURING and not torch.cuda.is_current_stream_capturing():
            return torch.zeros_like(inp)  # aiter's warm-up
        registered = self._flag() if self._IS_CAPTURING else False
        return self._all_reduce(self._source("custom_all_reduce", inp, registered))

    def reduce_scatter(self, inp: torch.Tensor, out: torch.Tensor, dim: int = 0, *,
                       registered: bool = False) -> None:
        source = self._source("reduce_scatter", inp, registered)
        if self.group is not None:
            torch.distributed.reduce_scatter_tensor(out, source, group=self.group)
            return
        chunk = source.view(self.world_size, *out.shape)[self.rank]
        out.copy_(chunk * (self.world_size * (self.world_size + 1) / 2))

    def _all_gather(self, source: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        if self.group is not None:
            torch.distributed.all_gather_into_tensor(out, source, group=self.group)
            return out
        parts = out.view(self.world_size, *source.shape)
        for k in range(self.world_size):
            parts[k].copy_(source * (k + 1))
        return out

    def all_gather_reg(self, inp: torch.Tensor, out: torch.Tensor, dim: int = 0) -> torch.Tensor:
        return self._all_gather(self._source("all_gather_reg", inp, True), out)

    def all_gather_unreg(self, inp: torch.Tensor, out: torch.Tensor,
                         dim: int = 0) -> torch.Tensor:
        return self._all_gather(self._source("all_gather_unreg", inp, False), out)

    def _fused(self, method: str, inp: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
               eps: float, registered: bool) -> tuple[torch.Tensor, torch.Tensor]:
        reduced = self._all_reduce(self._source(method, inp, registered))
        return fused_reference(reduced, residual, w, eps)

    def _quant(self, method: str, inp: torch.Tensor, residual: torch.Tensor, w: torch.Tensor,
               eps: float, group_size: int, registered: bool, emit_bf16: bool) -> Any:
        normed, res_out = self._fused(method, inp, residual, w, eps, registered)
        q, scale = quant_reference(normed, group_size)
        return (q, res_out, scale, normed) if emit_bf16 else (q, res_out, scale)

    def custom_fused_ar_rms(self, input: torch.Tensor, residual_inp: torch.Tensor,
                            weight: torch.Tensor, eps: float, use_1stage: bool,
                            out_hidden_dim: int = 0, gemma_norm: bool = False) -> Any:
        if self.disabled or not self.should_custom_ar(input):
            return None
        if self._IS_CAPTURING and not torch.cuda.is_current_stream_capturing():
            return torch.zeros_like(input), torch.zeros_like(input)  # aiter's warm-up
        return self._fused("custom_fused_ar_rms", input, residual_inp, weight, eps,
                           self._IS_CAPTURING)

    def custom_fused_ar_rms_per_group_quant(self, input: torch.Tensor,
                                            residual_inp: torch.Tensor, weight: torch.Tensor,
                                            eps: float, group_size: int = 128,
                                            use_1stage: bool = False, emit_bf16: bool = False,
                                            transpose_scale: bool = False) -> Any:
        if self.disabled or not self.should_custom_ar(input):
            return None
        if self._IS_CAPTURING and not torch.cuda.is_current_stream_capturing():
            q = torch.zeros(input.shape, dtype=torch.float8_e4m3fn, device=input.device)
            scale = torch.zeros((*input.shape[:-1], input.shape[-1] // group_size),
                                device=input.device)
            return (q, torch.zeros_like(input), scale)  # aiter's warm-up
        return self._quant("custom_fused_ar_rms_per_group_quant", input, residual_inp, weight,
                           eps, group_size, self._IS_CAPTURING, emit_bf16)


class ReducingCommunicator(ReducingCommunicatorWithoutUnregisteredFused):
    def fused_ar_rms(self, inp: torch.Tensor, res_inp: torch.Tensor, *, w: torch.Tensor,
                     eps: float, registered: bool = False, use_1stage: bool = False,
                     **kwargs: Any) -> Any:
        return self._fused("fused_ar_rms", inp, res_inp, w, eps, registered)

    def fused_ar_rms_per_group_quant(self, inp: torch.Tensor, res_inp: torch.Tensor, *,
                                     w: torch.Tensor, eps: float, group_size: int = 128,
                                     registered: bool = False, use_1stage: bool = False,
                                     emit_bf16: bool = False,
                                     transpose_scale: bool = False) -> Any:
        return self._quant("fused_ar_rms_per_group_quant", inp, res_inp, w, eps, group_size,
                           registered, emit_bf16)
