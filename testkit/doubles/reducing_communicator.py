"""Double of aiter's ``CustomAllreduce`` for the GPU tier: a real reduce-scatter on the stream.

It follows aiter's memory contract (``aiter/dist/device_communicators/custom_all_reduce.py``):

* ``registered=False``: the input is first copied into the communicator's own buffer (aiter's
  pre-registered IPC buffer), and the reduction reads that buffer;
* ``registered=True``: the reduction reads the caller's input directly; during stream capture
  the pointer is recorded, and when :meth:`capture` ends each recorded pointer is IPC-exported
  (``cuIpcGetMemHandle``), the step that fails on memory that cannot be exported.

The reduction is real: with a ``torch.distributed`` group it is ``reduce_scatter_tensor`` on that
group (NCCL); without one, the ``world_size`` ranks are virtual, rank ``k`` holding
``(k + 1) * input``, so rank ``r`` receives ``world_size * (world_size + 1) / 2`` times chunk
``r`` of its input.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

__all__ = ["ReducingCommunicator", "ipc_export_result"]


def ipc_export_result(pointer: int) -> int:
    """``cuIpcGetMemHandle`` on ``pointer``: 0 when the memory can be IPC-exported."""
    libcuda = ctypes.CDLL("libcuda.so.1")
    handle = (ctypes.c_byte * 64)()
    return int(libcuda.cuIpcGetMemHandle(ctypes.byref(handle), ctypes.c_uint64(pointer)))


class ReducingCommunicator:
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
        self.calls: list[bool] = []
        self.pending_exports: list[int] = []
        self.export_results: list[tuple[int, int]] = []

    def should_custom_ar(self, inp: torch.Tensor) -> bool:
        return inp.numel() <= self._buffer.numel()

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

    def reduce_scatter(self, inp: torch.Tensor, out: torch.Tensor, dim: int = 0, *,
                       registered: bool = False) -> None:
        self.calls.append(registered)
        if registered:
            if torch.cuda.is_current_stream_capturing():
                self.pending_exports.append(inp.data_ptr())
            source = inp
        else:
            source = self._buffer[: inp.numel()].view_as(inp)
            source.copy_(inp)
        if self.group is not None:
            torch.distributed.reduce_scatter_tensor(out, source, group=self.group)
            return
        chunk = source.view(self.world_size, *out.shape)[self.rank]
        out.copy_(chunk * (self.world_size * (self.world_size + 1) / 2))
