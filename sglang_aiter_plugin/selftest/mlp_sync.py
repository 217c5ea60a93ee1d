"""Batches as sglang's own MLP-sync padding hands them to the attention backend, eagerly.
Importing this module imports neither torch nor sglang.

With DP attention (and whenever sglang needs a gathered buffer) every scheduler step goes through
``ForwardBatch.prepare_mlp_sync_batch`` before the eager forward: each rank's token count is
aligned to the attention-TP size and a decode or idle batch then *has* that many rows
(``batch_size = num_tokens``). :func:`plain_batch` builds a real ``ForwardBatch`` for one rank;
:func:`mlp_synced` gives it the token counts the other ranks reported and runs sglang's real
method on it (the tests' other modes are in ``testkit/batches.py``).

What cannot exist on a machine without GPUs or a process group is stated, not faked in sglang's
code: the rank's place in the DP group (no distributed groups here), the gathered buffer's element
type (normally set when the model is loaded) and, on a machine without CUDA, host memory that is
not page-locked (sglang pins the token-count tensor it copies to the GPU).
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from unittest import mock

from sglang_aiter_plugin._rebind import rebound

if TYPE_CHECKING:
    import torch

    from sglang_aiter_plugin.selftest.sglang_setup import Setup

__all__ = ["SEQ_LEN", "mlp_synced", "plain_batch"]

SEQ_LEN = 7
"""Tokens already in each request's KV cache in the batches built here."""


def plain_batch(rows: int, device: str = "cpu", *, lens: list[int] | None = None,
                forward_mode: Any = None, tokens: int | None = None) -> Any:
    """A decode ``ForwardBatch`` of ``rows`` requests, request ``i`` in request slot ``i`` with
    :data:`SEQ_LEN` tokens (``lens``: each its own length). ``forward_mode`` and ``tokens`` (the
    batch's new tokens, one a row by default) give another mode's batch its size."""
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardBatch, ForwardMode

    tokens = rows if tokens is None else tokens
    if lens is None:
        lens = [SEQ_LEN] * rows
    seq = torch.tensor(lens[:rows], dtype=torch.int64, device=device)
    fb = ForwardBatch(
        forward_mode=ForwardMode.DECODE if forward_mode is None else forward_mode,
        batch_size=rows,
        input_ids=torch.zeros(tokens, dtype=torch.int64, device=device),
        req_pool_indices=torch.arange(rows, dtype=torch.int64, device=device),
        seq_lens=seq,
        out_cache_loc=torch.arange(tokens, dtype=torch.int64, device=device),
        seq_lens_sum=int(seq.sum()),
        seq_lens_cpu=seq.cpu(),
        positions=torch.zeros(tokens, dtype=torch.int64, device=device),
    )
    fb.lora_ids = [None] * rows  # as ForwardBatch.init_new copies it from a batch without LoRA
    return fb


def mlp_synced(setup: Setup, backend: Any, fb: Any, others: list[int], device: str = "cpu") -> Any:
    """``fb`` after sglang's ``prepare_mlp_sync_batch`` (where the configuration has MLP sync;
    otherwise as the eager forward gets it, unpadded).

    ``others``: the token counts the other DP ranks reported (one entry per rank). ``backend`` is
    what the model runner would hold as ``attn_backend`` (sglang reads its padding fill value
    from it).
    """
    import torch

    from sglang_aiter_plugin.backend.capacity import requires_mlp_sync

    if not requires_mlp_sync(setup.server_args):
        return fb  # the scheduler sends no token counts; sglang's eager forward pads nothing
    counts = [int(fb.input_ids.shape[0]), *others]
    fb.global_num_tokens_cpu = list(counts)
    fb.global_num_tokens_for_logprob_cpu = list(counts)
    fb.global_num_tokens_gpu = torch.tensor(counts, dtype=torch.int64, device=device)
    fb.global_num_tokens_for_logprob_gpu = torch.tensor(counts, dtype=torch.int64, device=device)
    fb.is_extend_in_batch = fb.forward_mode.is_extend()
    runner = setup.runner
    runner.attn_backend = backend
    if not hasattr(runner, "attn_tp_sequence_sharded"):
        # ModelRunner's default (0.5.2x): a forward is attention-TP sharded iff sglang holds a
        # gathered buffer. The real method lives on a class that cannot be imported here.
        from sglang.srt.utils.common import require_gathered_buffer

        runner.attn_tp_sequence_sharded = lambda num_tokens: require_gathered_buffer()
    if not hasattr(runner, "mambaish_config"):
        runner.mambaish_config = None  # a Llama model: no state-space layers
    with _one_rank_of(setup, len(counts)):
        method = type(fb).prepare_mlp_sync_batch
        if not torch.cuda.is_available():
            method = rebound(method, {"torch": _UnpinnedTorch()})
        method(fb, runner)
    return fb


class _UnpinnedTorch:
    """``torch`` as sglang's method sees it on a machine without CUDA: page-locking is a no-op."""

    def __getattr__(self, name: str) -> Any:
        import torch

        return getattr(torch, name)

    @staticmethod
    def tensor(*args: Any, pin_memory: bool = False, **kw: Any) -> torch.Tensor:
        import torch

        return torch.tensor(*args, **kw)


@contextlib.contextmanager
def _one_rank_of(setup: Setup, ranks: int) -> Iterator[None]:
    """State rank 0 of ``ranks`` DP ranks where sglang reads it (no process groups exist)."""
    import torch
    from sglang.srt.layers import dp_attention

    with contextlib.ExitStack() as scope:
        try:
            from sglang.srt.runtime_context import get_parallel
        except ImportError:  # 0.5.11-0.5.13
            get_parallel = None
        if get_parallel is not None:
            group = types.SimpleNamespace(ca_comm=None, cpu_group=None, device_group=None)
            try:  # 0.5.2x reads the TP group's custom all-reduce to choose the padding mode
                scope.enter_context(get_parallel().override(tp_group=group, attn_dp_rank=0))
            except (AttributeError, KeyError, TypeError):
                scope.enter_context(get_parallel().override(attn_dp_rank=0))
        for name, value in (("_ATTN_DP_RANK", 0), ("_ATTN_DP_SIZE", ranks),
                            ("_LOCAL_ATTN_DP_RANK", 0), ("_LOCAL_ATTN_DP_SIZE", ranks)):
            if hasattr(dp_attention, name):  # module globals up to 0.5.2x
                scope.enter_context(mock.patch.object(dp_attention, name, value))
        if hasattr(dp_attention, "initialize_dp_attention_flags"):
            dp_attention.initialize_dp_attention_flags(setup.server_args)
        if hasattr(dp_attention, "init_dp_gathered_buffer"):
            dp_attention.init_dp_gathered_buffer(setup.runner.model_config)
        elif hasattr(dp_attention, "_DpGatheredBufferWrapper"):
            wrapper = dp_attention._DpGatheredBufferWrapper
            config = setup.runner.model_config
            with contextlib.suppress(TypeError):
                wrapper.set_metadata(config.hidden_size, config.dtype, torch.device("cpu"))
        yield
