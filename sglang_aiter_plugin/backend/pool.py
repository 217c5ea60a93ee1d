"""A grow-only owner of per-batch buffers: one tensor per name, re-pointed everywhere on growth
(docs/buffer-pool.md). Holders keep plain tensors: nothing here runs per step."""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import Any, NamedTuple

import torch

from sglang_aiter_plugin._errors import AiterExtError

__all__ = ["Binding", "BufferPool", "BufferSpec", "Fill", "PoolFrozenError", "PoolSizeError",
           "UnknownBufferError"]


class Fill(str, enum.Enum):
    """What a buffer holds when it is (re)allocated; a function of the index, so growth keeps it.
    ``UNINITIALISED``: scratch memory a kernel writes before it reads (a workspace)."""

    ZEROS = "zeros"
    ONES = "ones"
    ARANGE = "arange"
    UNINITIALISED = "uninitialised"


class BufferSpec(NamedTuple):
    """One per-batch buffer: ``leading + (capacity * per_row + extra,)`` elements of ``dtype``
    (``per_row``: bytes for a workspace, ``topk`` for draft indptrs; ``extra``: 1 for an indptr;
    ``leading``: one row per draft step)."""

    name: str
    dtype: torch.dtype
    fill: Fill
    per_row: int = 1
    extra: int = 0
    leading: tuple[int, ...] = ()

    def shape(self, capacity: int) -> tuple[int, ...]:
        return (*self.leading, capacity * self.per_row + self.extra)

    def allocate(self, capacity: int, device: torch.device | str) -> torch.Tensor:
        shape = self.shape(capacity)
        if self.fill is Fill.ARANGE:
            row = torch.arange(shape[-1], dtype=self.dtype, device=device)
            return row.expand(shape).contiguous() if self.leading else row
        make = {Fill.ZEROS: torch.zeros, Fill.ONES: torch.ones}.get(self.fill, torch.empty)
        return make(shape, dtype=self.dtype, device=device)

    def matches(self, tensor: torch.Tensor, capacity: int) -> bool:
        """Whether ``tensor`` has this spec's shape at ``capacity`` and its dtype."""
        return tuple(tensor.shape) == self.shape(capacity) and tensor.dtype == self.dtype


class Binding(NamedTuple):
    """``holder.attr`` must hold the pool's ``buffer`` (or its ``row``, for a leading dimension)."""

    holder: Any
    attr: str
    buffer: str
    row: int | None = None


class PoolFrozenError(AiterExtError, RuntimeError):
    """The pool was asked to grow after CUDA graphs were captured against its buffers."""


class PoolSizeError(AiterExtError, ValueError):
    """A pool asked for fewer than one row, or given one buffer twice."""


class UnknownBufferError(AiterExtError, KeyError):
    """The pool was asked for a buffer it does not own."""


class BufferPool:
    """The single owner of a backend's per-batch buffers, sized in batch rows."""

    def __init__(self, owner: Any, specs: Iterable[BufferSpec], capacity: int,
                 device: torch.device | str) -> None:
        """Own ``specs`` at ``capacity`` rows, each bound to ``owner.<name>``: the tensor the owner
        holds there is kept where it fits exactly."""
        if capacity < 1:
            raise PoolSizeError(f"a buffer pool needs a capacity of at least 1 row, got {capacity}")
        self.owner, self.device = owner, device
        self.capacity = capacity  #: batch rows every buffer can hold
        self._specs: dict[str, BufferSpec] = {}
        for spec in specs:
            if spec.name in self._specs:
                raise PoolSizeError(f"buffer {spec.name!r} is described twice")
            self._specs[spec.name] = spec
        held = {name: getattr(owner, name, None) for name in self._specs}
        handed = {n: t for n, t in held.items() if isinstance(t, torch.Tensor)}
        self._tensors = {
            name: given if (given := handed.get(name)) is not None and spec.matches(given, capacity)
            else spec.allocate(capacity, device)
            for name, spec in self._specs.items()
        }
        #: the buffers allocated here because the tensor handed over did not fit
        self.reallocated = tuple(n for n, t in self._tensors.items() if t is not handed.get(n))
        self._handed_bytes = sum(t.nbytes for t in handed.values())
        self._bindings: list[Binding] = []
        self._frozen: str | None = None
        for name in self._specs:
            self.bind(owner, name, name)

    def bytes_beyond_handed(self) -> int:
        """Bytes the pool holds beyond the tensors it was handed at construction."""
        return sum(t.nbytes for t in self._tensors.values()) - self._handed_bytes

    def names(self) -> list[str]:
        return list(self._specs)

    def tensor(self, name: str) -> torch.Tensor:
        try:
            return self._tensors[name]
        except KeyError:
            raise UnknownBufferError(
                f"the pool owns no buffer {name!r} (it owns {self.names()})") from None

    def view(self, binding: Binding) -> torch.Tensor:
        """What ``binding`` must hold now."""
        tensor = self.tensor(binding.buffer)
        return tensor if binding.row is None else tensor[binding.row]

    def bind(self, holder: Any, attr: str, buffer: str, row: int | None = None) -> None:
        """Make ``holder.attr`` hold ``buffer`` now and after every growth."""
        binding = Binding(holder, attr, buffer, row)
        setattr(holder, attr, self.view(binding))  # validates the name and the row first
        self._bindings.append(binding)

    def stale_bindings(self) -> list[str]:
        """``holder.attr`` names that do not hold the pool's current tensor."""
        stale = []
        for b in self._bindings:
            held, want = getattr(b.holder, b.attr, None), self.view(b)
            if not (isinstance(held, torch.Tensor) and held.data_ptr() == want.data_ptr()
                    and held.shape == want.shape and held.stride() == want.stride()):
                stale.append(f"{type(b.holder).__name__}.{b.attr}")
        return stale

    def freeze(self, reason: str) -> None:
        """Refuse any later growth; ``reason`` says what holds the current addresses."""
        if self._frozen is None:
            self._frozen = reason

    def grow(self, capacity: int, reason: str) -> bool:
        """Hold ``capacity`` rows: if more than now, reallocate and re-point every binding; return
        whether it grew (:class:`PoolFrozenError` after :meth:`freeze`)."""
        if capacity < 1:
            raise PoolSizeError(
                f"{type(self.owner).__name__}: cannot size its per-batch buffers for {capacity} "
                f"rows ({reason}); a CUDA-graph batch size is at least 1"
            )
        if capacity <= self.capacity:
            return False
        if self._frozen is not None:
            raise PoolFrozenError(
                f"{type(self.owner).__name__}: cannot grow its per-batch buffers from "
                f"{self.capacity} to {capacity} rows ({reason}): {self._frozen}, and reallocating "
                "would leave those graphs reading and writing freed memory. Size the pool before "
                "the first capture (init_cuda_graph_state with the largest batch size)."
            )
        self._tensors = {n: s.allocate(capacity, self.device) for n, s in self._specs.items()}
        self.capacity = capacity
        for binding in self._bindings:
            setattr(binding.holder, binding.attr, self.view(binding))
        return True
