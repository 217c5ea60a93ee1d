"""A decode batch as sglang's CUDA-graph runner hands it to a backend's metadata calls.

The static inputs of one captured batch size, and the metadata call of whichever interface the
installed sglang has (0.5.18+: ``init_forward_metadata_out_graph``; older: capture/replay
methods). Importing this module imports neither torch nor sglang.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["Batch", "DecodeBatch", "draft_metadata"]


class Batch(SimpleNamespace):
    """The ForwardBatch fields a backend reads; any other field reads as None."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return None


class DecodeBatch:
    """Static inputs of one captured batch size, updated in place before each replay."""

    def __init__(self, backend: Any, bs: int, device: str, q_width: int | None = None) -> None:
        """``q_width``: query entries per row (default ``num_head * head_dim``; MLA's differ)."""
        import torch
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        self.backend, self.bs = backend, bs
        self.req_pool_indices = torch.zeros(bs, dtype=torch.int64, device=device)
        self.seq_lens = torch.ones(bs, dtype=torch.int64, device=device)
        width = q_width if q_width is not None else backend.num_head * backend.head_dim
        self.q = torch.zeros(bs, width, dtype=backend.input_dtype, device=device)
        self.fb = Batch(
            batch_size=bs, req_pool_indices=self.req_pool_indices, seq_lens=self.seq_lens,
            seq_lens_cpu=self.seq_lens.cpu(), seq_lens_sum=bs, forward_mode=ForwardMode.DECODE,
            spec_info=None, input_ids=torch.zeros(bs, dtype=torch.int64, device=device),
            out_cache_loc=None, positions=None, encoder_lens=None, kv_loc_plan=None,
        )

    def set(self, reqs: list[int], lens: list[int], q: torch.Tensor) -> None:
        import torch

        fill = self.backend.get_cuda_graph_seq_len_fill_value()
        pad = self.bs - len(reqs)
        self.req_pool_indices.copy_(torch.tensor(reqs + [0] * pad))
        self.seq_lens.copy_(torch.tensor(lens + [fill] * pad))
        self.fb.seq_lens_cpu = self.seq_lens.cpu()
        self.fb.seq_lens_sum = int(self.fb.seq_lens_cpu.sum())
        self.q.zero_()
        self.q[: len(reqs)].copy_(q.reshape(len(reqs), -1))

    def metadata(self, in_capture: bool) -> None:
        b, fb = self.backend, self.fb
        if hasattr(b, "init_forward_metadata_out_graph"):
            b.init_forward_metadata_out_graph(fb, in_capture=in_capture)
        elif in_capture:
            b.init_forward_metadata_capture_cuda_graph(
                self.bs, self.bs, self.req_pool_indices, self.seq_lens, None, fb.forward_mode, None
            )
        else:
            b.init_forward_metadata_replay_cuda_graph(
                self.bs, self.req_pool_indices, self.seq_lens, fb.seq_lens_sum, None,
                fb.forward_mode, None, fb.seq_lens_cpu,
            )

    def forward(self, layer: Any) -> torch.Tensor:
        out: torch.Tensor = self.backend.forward_decode(
            self.q, None, None, layer, self.fb, save_kv_cache=False
        )
        return out

    def capture(self, layer: Any) -> tuple[Any, torch.Tensor]:
        """As sglang's graph runner does: the capture metadata, a warm-up forward, then the
        forward captured in a CUDA graph. Returns the graph and its output tensor."""
        import torch

        self.metadata(in_capture=True)
        self.forward(layer)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = self.forward(layer)
        return graph, out

    def run(self, layer: Any, reqs: list[int], lens: list[int], q: torch.Tensor,
            captured: tuple[Any, torch.Tensor] | None = None) -> torch.Tensor:
        """Set the batch, write its replay metadata, then replay ``captured`` (from
        :meth:`capture`) or, without it, run the forward eagerly. Returns the output."""
        self.set(reqs, lens, q)
        self.metadata(in_capture=False)
        if captured is None:
            return self.forward(layer)
        graph, out = captured
        graph.replay()
        return out


def draft_metadata(draft: Any, fb: Batch) -> None:
    """The draft wrapper's replay-time metadata call (0.5.18+: ``out_graph``; older: replay)."""
    if hasattr(draft, "init_forward_metadata_out_graph"):
        draft.init_forward_metadata_out_graph(fb)
    else:
        draft.init_forward_metadata_replay_cuda_graph(fb, fb.batch_size)
