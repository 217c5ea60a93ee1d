"""Graph buffers whose width grows with the context (docs/buffer-pool.md): widened once, at graph
set-up before any capture, and only from a layout known here."""

from __future__ import annotations

from typing import Any

import torch

from sglang_aiter_plugin._errors import AiterExtError
from sglang_aiter_plugin._sglang import installed_sglang_version

__all__ = ["UnknownGraphLayoutError", "widen"]


class UnknownGraphLayoutError(AiterExtError, RuntimeError):
    """Upstream's ``init_cuda_graph_state`` sized a graph buffer in a layout not known here."""


def widen(owner: Any, name: str, need: int, known: dict[int, str], multiple_of: int = 1,
          leading: tuple[int, ...] = ()) -> bool:
    """Give ``owner.name`` ``need`` zeroed entries (per leading row) where upstream left fewer in
    a ``known`` layout (entries -> releases); return whether it did; raise for an unknown one."""
    buffer: torch.Tensor = getattr(owner, name)
    have = int(buffer.shape[-1]) if leading else int(buffer.numel())
    if have >= need:
        return False
    if have not in known:
        layouts = "; ".join(f"{n} ({where})" for n, where in known.items())
        upstream = next(c for c in type(owner).__mro__ if c.__module__.startswith("sglang."))
        raise UnknownGraphLayoutError(
            f"sglang {installed_sglang_version()}: {upstream.__name__}."
            f"init_cuda_graph_state allocated {name} with {have} entries, fewer than the {need} "
            f"its graph replays write, in a layout sglang-aiter-plugin does not know (it knows "
            f"{layouts}). Use --attention-backend aiter, or a sglang-aiter-plugin release that "
            "supports this sglang."
        )
    size = -(-need // multiple_of) * multiple_of
    setattr(owner, name, torch.zeros((*leading, size), dtype=buffer.dtype, device=buffer.device))
    return True
