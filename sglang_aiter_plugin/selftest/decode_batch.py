"""A decode or target-verify batch as sglang's CUDA-graph runner hands it to a backend's
metadata calls.

The static inputs of one captured batch size, and the metadata call of whichever interface the
installed sglang has (0.5.18+: ``init_forward_metadata_out_graph``; older: capture/replay
methods). Importing this module imports neither torch nor sglang.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["Batch", "DecodeBatch", "VerifyBatch", "draft_kv", "draft_metadata", "extend_query",
           "verify_mask"]


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
        self.q[: q.shape[0]].copy_(q.reshape(q.shape[0], -1))

    def metadata(self, in_capture: bool) -> None:
        b, fb = self.backend, self.fb
        if hasattr(b, "init_forward_metadata_out_graph"):
            b.init_forward_metadata_out_graph(fb, in_capture=in_capture)
        elif in_capture:
            b.init_forward_metadata_capture_cuda_graph(
                self.bs, int(fb.input_ids.shape[0]), self.req_pool_indices, self.seq_lens, None,
                fb.forward_mode, fb.spec_info
            )
        else:
            b.init_forward_metadata_replay_cuda_graph(
                self.bs, self.req_pool_indices, self.seq_lens, fb.seq_lens_sum, None,
                fb.forward_mode, fb.spec_info, fb.seq_lens_cpu,
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


class VerifyBatch(DecodeBatch):
    """A batch of ``draft`` tokens a request, top-1 (a linear chain), through ``forward_extend``:
    EAGLE's target verify (``mode`` ``verify``: each request's ``seq_lens`` are its tokens before
    the drafts, the drafts' keys and values already in the KV pool right after them, as sglang
    writes them before attention; a custom mask) or the draft's draft extend (``draft-extend``,
    sglang's ``DRAFT_EXTEND_V2``: ``seq_lens`` count the drafts too, no mask). Either way each
    draft token attends to the request's tokens and to the draft tokens up to itself. ``q``
    holds ``bs * draft`` rows."""

    def __init__(self, backend: Any, bs: int, device: str, draft: int, runner: Any,
                 q_width: int | None = None, mode: str = "verify") -> None:
        import torch
        from sglang.srt.model_executor.forward_batch_info import ForwardMode

        super().__init__(backend, bs, device, q_width)
        self.draft, self.runner, self.extend = draft, runner, mode == "draft-extend"
        tokens = bs * draft
        self.q = torch.zeros(tokens, self.q.shape[1], dtype=self.q.dtype, device=device)
        k, v = _kv_buffers(runner)
        self.k = torch.zeros(tokens, *k.shape[1:], dtype=k.dtype, device=device)
        self.v = torch.zeros(tokens, *v.shape[1:], dtype=v.dtype, device=device)
        self.fb.forward_mode = (ForwardMode.DRAFT_EXTEND_V2 if self.extend
                                else ForwardMode.TARGET_VERIFY)
        self.fb.input_ids = torch.zeros(tokens, dtype=torch.int64, device=device)
        self.fb.spec_info = Batch(draft_token_num=draft, num_tokens_per_req=draft,
                                  custom_mask=None if self.extend
                                  else verify_mask([1] * bs, draft, device))

    def set(self, reqs: list[int], lens: list[int], q: torch.Tensor) -> None:
        super().set(reqs, lens, q)
        k, v = draft_kv(self.runner, self.req_pool_indices, self.seq_lens, self.draft)
        self.k.copy_(k)
        self.v.copy_(v)
        if self.extend:  # the drafts are part of each real request's KV
            self.seq_lens[: len(reqs)] += self.draft
            self.fb.seq_lens_cpu = self.seq_lens.cpu()
            self.fb.seq_lens_sum = int(self.fb.seq_lens_cpu.sum())
        else:
            self.fb.spec_info.custom_mask = verify_mask(self.seq_lens.tolist(), self.draft,
                                                        str(self.q.device))

    def forward(self, layer: Any) -> torch.Tensor:
        out: torch.Tensor = self.backend.forward_extend(
            extend_query(self.backend, self.q), self.k, self.v, layer, self.fb,
            save_kv_cache=False
        )
        return out


def extend_query(backend: Any, q: torch.Tensor) -> torch.Tensor:
    """``q`` ([rows, heads * dim]) as ``backend.forward_extend`` takes it: MLA's per head
    ([rows, heads, dim]), the others' as it is."""
    if getattr(backend, "use_mla", False):
        return q.view(q.shape[0], int(backend.num_head), -1)
    return q


def _kv_buffers(runner: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer 0's key and value buffers (MLA: the latent, and its first ``kv_lora_rank``)."""
    pool = runner.token_to_kv_pool
    return pool.get_key_buffer(0), pool.get_value_buffer(0)


def draft_kv(runner: Any, req_pool_indices: torch.Tensor, seq_lens: torch.Tensor,
             draft: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The keys and values of each request's ``draft`` tokens, already in the KV pool right after
    its ``seq_lens`` tokens (sglang writes them before attention)."""
    import torch

    table = runner.req_to_token_pool.req_to_token
    slots = torch.cat([table[r, n:n + draft] for r, n in zip(
        req_pool_indices.tolist(), seq_lens.tolist(), strict=True)]).long()
    k, v = _kv_buffers(runner)
    return k[slots], v[slots]


def verify_mask(lens: list[int], draft: int, device: str) -> torch.Tensor:
    """EAGLE's top-1 verify mask, as sglang flattens it: per request, ``draft`` rows of
    ``seq_len + draft`` entries, each draft token seeing the request's tokens and the draft
    tokens up to itself."""
    import torch

    chain = torch.ones(draft, draft, dtype=torch.bool).tril()
    rows = [torch.cat([torch.ones(draft, n, dtype=torch.bool), chain], 1).reshape(-1)
            for n in lens]
    return torch.cat(rows).to(device)


def draft_metadata(draft: Any, fb: Batch) -> None:
    """The draft wrapper's replay-time metadata call (0.5.18+: ``out_graph``; older: replay)."""
    if hasattr(draft, "init_forward_metadata_out_graph"):
        draft.init_forward_metadata_out_graph(fb)
    else:
        draft.init_forward_metadata_replay_cuda_graph(fb, fb.batch_size)
