"""aiter's real ``unified_attention`` behind sglang's backend, watched from outside the kernel.

The KV and the torch reference come from the package's self-test
(:mod:`sglang_aiter_plugin.selftest.reference`); here, for the CPU tests (Triton interpreted):

* :class:`SentinelKernel` stands between sglang and the kernel on CPU. It copies the
  ``cu_seqlens_q`` each call was handed into a buffer one entry longer and calls the kernel with
  the handed-length view of it (the same values, the same length) twice, with two *sentinels* in
  the entry after the end: the last handed value (read as the last sequence's query end, that
  sequence is empty) and that value plus one (one query row). A kernel that never reads past the
  end gives the same output both times; one that does gives two different outputs. The
  interpreter never sees memory past a tensor this way (a short tensor of its own would let it
  write past ``out``). sglang gets the second output.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch

__all__ = ["KernelCall", "SentinelKernel"]


@dataclasses.dataclass
class KernelCall:
    """One call of the kernel as sglang made it."""

    seqs: int
    """``seqused_k.numel()``: the sequences the kernel walks; it needs ``seqs + 1`` entries."""
    handed: int
    """``cu_seqlens_q.numel()``: the entries sglang's metadata gave it."""
    cu_seqlens_q: list[int]
    max_seqlen_q: int
    rows: int
    read_past_end: bool
    """The output changed with the sentinel after the end: the kernel read that entry."""
    unwritten_rows: list[int]
    """Output rows still NaN after the call (the kernel computed nothing for them)."""
    out: torch.Tensor = dataclasses.field(repr=False)

    def as_record(self) -> dict[str, Any]:
        return {
            "seqs": self.seqs, "handed": self.handed, "max_seqlen_q": self.max_seqlen_q,
            "rows": self.rows, "read_past_end": self.read_past_end,
            "unwritten_rows": self.unwritten_rows,
            "cu_seqlens_q_tail": self.cu_seqlens_q[-3:],
        }


class SentinelKernel:
    """Calls ``kernel`` with two sentinels after ``cu_seqlens_q``; records each call."""

    def __init__(self, kernel: Callable[..., Any]) -> None:
        self.kernel = kernel
        self.calls: list[KernelCall] = []

    def __call__(self, *, q: torch.Tensor, out: torch.Tensor, cu_seqlens_q: torch.Tensor,
                 seqused_k: torch.Tensor, max_seqlen_q: int, **kwargs: Any) -> Any:
        handed = cu_seqlens_q.numel()
        padded = torch.empty(handed + 1, dtype=cu_seqlens_q.dtype, device=cu_seqlens_q.device)
        padded[:handed] = cu_seqlens_q
        outputs = []
        for extra in (0, 1):
            padded[handed] = cu_seqlens_q[-1] + extra
            out.fill_(float("nan"))
            result = self.kernel(q=q, out=out, cu_seqlens_q=padded[:handed], seqused_k=seqused_k,
                                 max_seqlen_q=max_seqlen_q, **kwargs)
            outputs.append(out.detach().clone())
        nan_rows = torch.isnan(out.float()).flatten(1).any(dim=1)
        self.calls.append(KernelCall(
            seqs=seqused_k.numel(), handed=handed, cu_seqlens_q=cu_seqlens_q.tolist(),
            max_seqlen_q=int(max_seqlen_q), rows=out.shape[0],
            read_past_end=not _same_bits(*outputs),
            unwritten_rows=torch.nonzero(nan_rows).flatten().tolist(), out=outputs[-1],
        ))
        return result


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equality (NaN rows included)."""
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))
