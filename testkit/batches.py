"""The tests' batches beside the self-test's decode batches: extend, idle and EAGLE draft-extend
batches through sglang's MLP-sync padding, the EAGLE draft graph runner's batch, and a
:class:`RecordingBatch` that lists the fields a backend read and did not get.

Built on the self-test's own (:mod:`sglang_aiter_plugin.selftest.mlp_sync`,
:mod:`sglang_aiter_plugin.selftest.decode_batch`): the ``ForwardBatch`` and the padding are
theirs; only what the self-test never runs is here.
"""

from __future__ import annotations

import types
from typing import Any, ClassVar

from sglang_aiter_plugin.selftest.decode_batch import Batch
from sglang_aiter_plugin.selftest.mlp_sync import SEQ_LEN, mlp_synced, plain_batch

__all__ = ["MODES", "RecordingBatch", "draft_batch", "mode_batch", "synced_batch"]

MODES = ("decode", "extend", "idle", "draft-extend")


def mode_batch(mode: str, rows: int, device: str = "cpu", *, extend_len: int = 3,
               lens: list[int] | None = None) -> Any:
    """A ``ForwardBatch`` of ``rows`` requests in ``mode`` (a key of :data:`MODES`;
    ``draft-extend``: only its size is used, its draft input is a stand-in).

    Request ``i`` sits in request slot ``i``; decode rows have ``SEQ_LEN`` tokens, extend rows
    add ``extend_len`` new tokens to a prefix of ``SEQ_LEN - extend_len``. ``lens`` gives each
    request its own length instead (at least ``extend_len`` for extend rows).
    """
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    forward_mode = {
        "decode": ForwardMode.DECODE,
        "extend": ForwardMode.EXTEND,
        "idle": ForwardMode.IDLE,
        "draft-extend": ForwardMode.DRAFT_EXTEND_V2,
    }[mode]
    if mode == "idle":
        rows = 0
    lens = [SEQ_LEN] * rows if lens is None else lens
    tokens = rows * (extend_len if mode in ("extend", "draft-extend") else 1)
    fb = plain_batch(rows, device, lens=lens, forward_mode=forward_mode, tokens=tokens)
    if mode == "draft-extend":  # EAGLE's draft extend: extend_len draft tokens per request
        fb.spec_info = types.SimpleNamespace(
            num_tokens_per_req=extend_len, is_draft_input=lambda: True, hidden_states=None,
            topk_p=None, topk_index=None, pad_batch=lambda pad, bs: None,
        )
    if mode == "extend":
        prefix = [n - extend_len for n in lens[:rows]]
        fb.extend_num_tokens = tokens
        fb.extend_seq_lens = torch.full((rows,), extend_len, dtype=torch.int32, device=device)
        fb.extend_prefix_lens = torch.tensor(prefix, dtype=torch.int32, device=device)
        fb.extend_start_loc = torch.arange(0, tokens, extend_len, dtype=torch.int32, device=device)
        fb.extend_seq_lens_cpu = [extend_len] * rows
        fb.extend_prefix_lens_cpu = prefix
        fb.extend_logprob_start_lens_cpu = list(prefix)
    return fb


def synced_batch(setup: Any, backend: Any, mode: str, rows: int, others: list[int],
                 device: str = "cpu", *, lens: list[int] | None = None) -> Any:
    """:func:`mode_batch` after sglang's ``prepare_mlp_sync_batch``, as the self-test pads its
    decode batch (:func:`sglang_aiter_plugin.selftest.mlp_sync.mlp_synced`)."""
    return mlp_synced(setup, backend, mode_batch(mode, rows, device, lens=lens), others, device)


def draft_batch(runner: Any, bs: int, device: str, seq_len: int = 9) -> Batch:
    """What the EAGLE draft graph runner hands the multi-step draft wrapper for ``bs`` sequences
    of ``seq_len`` tokens each (all in request slot 0)."""
    import torch
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    seq = torch.full((bs,), seq_len, device=device)
    return Batch(
        batch_size=bs, seq_lens=seq, seq_lens_cpu=seq.cpu(), seq_lens_sum=seq_len * bs,
        req_pool_indices=torch.zeros(bs, dtype=torch.int64, device=device), positions=seq,
        forward_mode=ForwardMode.DECODE, spec_info=Batch(),
        input_ids=torch.zeros(bs, dtype=torch.int64, device=device),
        req_to_token_pool=runner.req_to_token_pool,
    )


class RecordingBatch(Batch):
    """A :class:`~sglang_aiter_plugin.selftest.decode_batch.Batch` that lists, in
    :attr:`defaulted`, every field a backend read and was not given (it reads as None)."""

    defaulted: ClassVar[set[str]] = set()

    def __getattr__(self, name: str) -> Any:
        value = super().__getattr__(name)
        RecordingBatch.defaulted.add(name)
        return value
