"""A grow-only owner of per-batch buffers: one tensor per name, re-pointed everywhere on growth.

A backend describes each buffer whose length depends on the batch size (:class:`BufferSpec`), hands
the pool the tensors it already allocated, and *binds* every attribute that must hold one of them
(:meth:`BufferPool.bind`). :meth:`BufferPool.grow` reallocates all buffers at the new capacity with
their fill, re-points every binding itself, and only then tells observers (the pluggy hook
``aiter_ext_pool_resized``, for other packages; the pool needs none of them). After
:meth:`BufferPool.freeze` (CUDA graphs hold the buffers' addresses) growing raises
:class:`PoolFrozenError`.

Holders keep plain tensors as attributes: nothing here runs on the per-step path.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from sglang_aiter_plugin._errors import AiterExtError

__all__ = ["Binding", "BufferPool", "BufferSpec", "Fill", "PoolFrozenError"]

logger = logging.getLogger(__name__)


class Fill(str, enum.Enum):
    """What a buffer holds when it is (re)allocated; a function of the index, so growth keeps it."""

    ZEROS = "zeros"
    ONES = "ones"
    ARANGE = "arange"
    UNINITIALISED = "uninitialised"
    """Scratch memory a kernel writes before it reads (a workspace)."""

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class BufferSpec:
    """One per-batch buffer: ``leading + (capacity * per_row + extra,)`` elements of ``dtype``."""

    name: str
    dtype: torch.dtype
    fill: Fill
    per_row: int = 1
    """Elements per batch row (bytes for a ``uint8`` workspace; ``topk`` for draft indptrs)."""
    extra: int = 0
    """Elements beyond the rows: 1 for an indptr."""
    leading: tuple[int, ...] = ()
    """Dimensions before the batch dimension (one row per draft step)."""

    def shape(self, capacity: int) -> tuple[int, ...]:
        return (*self.leading, capacity * self.per_row + self.extra)

    def allocate(self, capacity: int, device: torch.device | str) -> torch.Tensor:
        shape = self.shape(capacity)
        if self.fill is Fill.ZEROS:
            return torch.zeros(shape, dtype=self.dtype, device=device)
        if self.fill is Fill.ONES:
            return torch.ones(shape, dtype=self.dtype, device=device)
        if self.fill is Fill.ARANGE:
            row = torch.arange(shape[-1], dtype=self.dtype, device=device)
            return row.expand(shape).contiguous() if self.leading else row
        return torch.empty(shape, dtype=self.dtype, device=device)

    def matches(self, tensor: torch.Tensor, capacity: int) -> bool:
        """Whether ``tensor`` has this spec's shape at ``capacity`` and its dtype."""
        return tuple(tensor.shape) == self.shape(capacity) and tensor.dtype == self.dtype


@dataclass(frozen=True)
class Binding:
    """``holder.attr`` must hold the pool's ``buffer`` (or its ``row``, for a leading dimension)."""

    holder: Any
    attr: str
    buffer: str
    row: int | None = None


class PoolFrozenError(AiterExtError, RuntimeError):
    """The pool was asked to grow after CUDA graphs were captured against its buffers."""


class BufferPool:
    """The single owner of a backend's per-batch buffers, sized in batch rows."""

    def __init__(
        self,
        owner: Any,
        specs: Iterable[BufferSpec],
        capacity: int,
        device: torch.device | str,
        *,
        adopt: Mapping[str, torch.Tensor] | None = None,
    ) -> None:
        """Own ``specs`` at ``capacity`` rows, reusing the tensors in ``adopt`` that fit exactly."""
        if capacity < 1:
            raise ValueError(f"a buffer pool needs a capacity of at least 1 row, got {capacity}")
        self.owner = owner
        self.device = device
        self._specs: dict[str, BufferSpec] = {}
        for spec in specs:
            if spec.name in self._specs:
                raise ValueError(f"buffer {spec.name!r} is described twice")
            self._specs[spec.name] = spec
        self._capacity = capacity
        self._tensors: dict[str, torch.Tensor] = {}
        self._bindings: list[Binding] = []
        self._frozen: str | None = None
        adopt = adopt or {}
        unknown = sorted(set(adopt) - set(self._specs))
        if unknown:
            raise ValueError(f"cannot adopt {unknown}: the pool has no spec for them")
        for name, spec in self._specs.items():
            given = adopt.get(name)
            if given is not None and spec.matches(given, capacity):
                self._tensors[name] = given
            else:
                self._tensors[name] = spec.allocate(capacity, device)

    @property
    def capacity(self) -> int:
        """Batch rows every buffer can hold."""
        return self._capacity

    @property
    def frozen(self) -> bool:
        return self._frozen is not None

    @property
    def specs(self) -> Mapping[str, BufferSpec]:
        return dict(self._specs)

    @property
    def bindings(self) -> tuple[Binding, ...]:
        return tuple(self._bindings)

    def names(self) -> list[str]:
        return list(self._specs)

    def tensor(self, name: str) -> torch.Tensor:
        try:
            return self._tensors[name]
        except KeyError:
            raise KeyError(f"the pool owns no buffer {name!r} (it owns {self.names()})") from None

    def view(self, binding: Binding) -> torch.Tensor:
        """What ``binding`` must hold now."""
        tensor = self.tensor(binding.buffer)
        return tensor if binding.row is None else tensor[binding.row]

    def bind(self, holder: Any, attr: str, buffer: str, row: int | None = None) -> None:
        """Make ``holder.attr`` hold ``buffer`` now and after every growth."""
        binding = Binding(holder, attr, buffer, row)
        self.view(binding)  # validates the name and the row
        self._bindings.append(binding)
        setattr(holder, attr, self.view(binding))

    def _repoint(self) -> None:
        """Set every bound attribute to the pool's current tensor."""
        for binding in self._bindings:
            setattr(binding.holder, binding.attr, self.view(binding))

    def stale_bindings(self) -> list[str]:
        """``holder.attr`` names that do not hold the pool's current tensor."""
        stale = []
        for b in self._bindings:
            held = getattr(b.holder, b.attr, None)
            want = self.view(b)
            if not (
                isinstance(held, torch.Tensor)
                and held.data_ptr() == want.data_ptr()
                and held.shape == want.shape
                and held.stride() == want.stride()
            ):
                stale.append(f"{type(b.holder).__name__}.{b.attr}")
        return stale

    def freeze(self, reason: str) -> None:
        """Refuse any later growth; ``reason`` says what holds the current addresses."""
        if self._frozen is None:
            self._frozen = reason

    def grow(self, capacity: int, reason: str) -> bool:
        """Hold ``capacity`` rows; reallocate, re-point and then announce if that is more than now.

        Returns whether the pool grew. Raises ``ValueError`` for fewer than one row and
        :class:`PoolFrozenError` when it would have to grow after :meth:`freeze`.
        """
        if capacity < 1:
            raise ValueError(
                f"{type(self.owner).__name__}: cannot size its per-batch buffers for {capacity} "
                f"rows ({reason}); a CUDA-graph batch size is at least 1"
            )
        if capacity <= self._capacity:
            return False
        if self._frozen is not None:
            raise PoolFrozenError(
                f"{type(self.owner).__name__}: cannot grow its per-batch buffers from "
                f"{self._capacity} to {capacity} rows ({reason}): {self._frozen}, and reallocating "
                "would leave those graphs reading and writing freed memory. Size the pool before "
                "the first capture (init_cuda_graph_state with the largest batch size)."
            )
        old = self._capacity
        self._tensors = {n: s.allocate(capacity, self.device) for n, s in self._specs.items()}
        self._capacity = capacity
        self._repoint()
        _announce(self, old, capacity, reason)
        return True


def _announce(pool: BufferPool, old: int, new: int, reason: str) -> None:
    """Tell the observers of ``aiter_ext_pool_resized``, if the plugin registered any.

    The pool is already consistent: an observer that raises is logged, never fatal.
    """
    from sglang_aiter_plugin.plugin.manager import current_manager
    from sglang_aiter_plugin.plugin.spec import PoolResize

    manager = current_manager()
    if manager is None:
        return
    try:
        manager.announce_resize(PoolResize(pool, pool.owner, old, new, reason))
    except Exception:
        logger.exception("sglang-aiter-plugin: an aiter_ext_pool_resized observer raised; "
                         "the pool itself grew and re-pointed its holders")
