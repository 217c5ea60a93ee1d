"""Double of the ROCm ``aiter`` package for a real sglang server on CPU: torch reference kernels.

sglang's aiter backend imports its kernels from ``aiter`` (``from aiter import
paged_attention_ragged, mha_batch_prefill_func, ...``, ``from aiter.mla import ...``,
``from aiter.ops.triton.attention.unified_attention import unified_attention``). Without ROCm the
real package cannot import, so :func:`install` puts a stand-in package in ``sys.modules``:

* ``paged_attention_ragged`` (decode) and ``mha_batch_prefill_func`` (extend): plain float32
  torch attention with aiter's per-row contract -- decode row ``s`` reads ``kv_indptr[s]`` and
  ``kv_indptr[s + 1]``, its pages from ``kv_page_indices`` and, for pages of several tokens,
  ``kv_last_page_lens[s]``, for
  ``query.size(0)`` rows; extend row block ``b`` reads ``cu_seqlens_q[b:b + 2]`` and
  ``kv_indptr[b:b + 2]``, causally;
* ``mla_decode_fwd`` (MLA decode) and ``flash_attn_varlen_func`` (an MLA model's extend, as
  multi-head attention), on CPU only: the same torch attention over the latent KV with aiter's
  per-row contract (:func:`mla_decode_fwd`), and over ragged keys and values
  (:func:`flash_attn_varlen_func`);
* ``get_mla_metadata_info_v1`` and ``get_mla_metadata_v1``, on a GPU only (sglang allocates the
  persistent MLA schedule, its fp8-KV path, on CUDA): the schedule doubles of
  :mod:`.aiter_mla_persistent`, read there by aiter's own ``mla.py`` (the ``mla`` double);
* ``unified_attention``: aiter's real Triton kernel (:mod:`testkit.doubles.aiter_triton`, under
  Triton's interpreter) when ``unified`` is asked for; otherwise a stand-in that refuses;
* every other name (and any ``aiter.*`` submodule) a callable that raises, naming itself.

On a CUDA GPU (``on_gpu``) the decode and extend kernels are the capture-safe Triton references
of :mod:`testkit.doubles.aiter_gpu_kernels` (same contract, no host reads of device values), so
sglang's decode CUDA graphs capture them; ``flash_attn_varlen_func`` stays the torch double (an
MLA model's extend, never captured: prefill graphs are off), and the MLA decode is aiter's own
``mla.py`` where the server plugin loads it (``mla``: :func:`recording_mla_stage1`).

Observation, for the tests: each process appends one line to ``<record dir>/<pid>.log`` the first
time a decode kernel sees a batch of a given number of rows (``paged_attention_ragged rows=4``,
``mla_decode_fwd rows=4``).

The control: while the file named by :data:`WRONG_SLOT_FLAG_VAR` exists, the decode kernel
reads the second KV slot of each sequence in place of its first (one wrong slot), so its output
must differ from a correct backend's. The MLA decode (on CPU) does the same while the file named
by :data:`WRONG_MLA_SLOT_FLAG_VAR` exists (a flag of its own: a self-test run under the first
flag still expects its MLA cases right). On the GPU the kernel reads a device flag, which
:func:`refresh_control` sets from the file (at each eager call, and before each graph replay
where the server's replay recorder calls it), so captured graphs follow the control too.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import os
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch

__all__ = ["RECORD_DIR_VAR", "WRONG_MLA_SLOT_FLAG_VAR", "WRONG_SLOT_FLAG_VAR",
           "flash_attn_varlen_func", "install", "mha_batch_prefill_func", "mla_decode_fwd",
           "paged_attention_ragged", "record", "recording_mla_stage1", "recording_unified",
           "refresh_control"]

WRONG_SLOT_FLAG_VAR = "SGLANG_E2E_WRONG_KV_SLOT_FLAG"
"""A path: while a file exists there, the decode kernel reads one wrong KV slot (the control)."""
WRONG_MLA_SLOT_FLAG_VAR = "SGLANG_E2E_WRONG_MLA_KV_SLOT_FLAG"
"""The same for the MLA decode (CPU)."""
RECORD_DIR_VAR = "SGLANG_E2E_RECORD_DIR"

_rows_seen: set[int] = set()
_mla_rows_seen: set[int] = set()


def record(line: str) -> None:
    """Append ``line`` to this process's record file (when the tests gave a record directory)."""
    where = os.environ.get(RECORD_DIR_VAR)
    if where:
        with open(os.path.join(where, f"{os.getpid()}.log"), "a") as f:
            f.write(line.rstrip("\n") + "\n")


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scale: float,
            causal_offset: int | None) -> torch.Tensor:
    """``q`` [rows, H, D] over ``k``/``v`` [n, Hkv, D] in float32; causal when an offset is given
    (row ``i`` sees the first ``causal_offset + i + 1`` keys)."""
    group = q.shape[1] // k.shape[1]
    kk = k.float().repeat_interleave(group, dim=1)
    vv = v.float().repeat_interleave(group, dim=1)
    logits = torch.einsum("qhd,nhd->hqn", q.float(), kk) * scale
    if causal_offset is not None:
        rows, n = q.shape[0], k.shape[0]
        where = torch.arange(n, device=q.device)
        visible = where[None, :] <= (causal_offset + torch.arange(rows, device=q.device))[:, None]
        logits = logits.masked_fill(~visible[None], float("-inf"))
    return torch.einsum("hqn,nhd->qhd", torch.softmax(logits, dim=-1), vv)


def _tokens(cache: torch.Tensor) -> torch.Tensor:
    """A KV cache as [slots, Hkv, D] (page size 1: ``[N, 1, Hkv, D]`` or ``[N, Hkv, D]``)."""
    return cache.reshape(-1, *cache.shape[-2:])


def paged_attention_ragged(
    out: torch.Tensor, workspace_buffer: torch.Tensor, query: torch.Tensor,
    key_cache: torch.Tensor, value_cache: torch.Tensor, scale: float, kv_indptr: torch.Tensor,
    kv_page_indices: torch.Tensor, kv_last_page_lens: torch.Tensor | None, block_size: int,
    max_num_partitions: int, *args: Any, **kwargs: Any,
) -> None:
    num_seqs = query.shape[0]
    if kv_indptr.numel() < num_seqs + 1:
        raise RuntimeError(f"aiter kernel double: kv_indptr holds {kv_indptr.numel()} entries; "
                           f"a batch of {num_seqs} rows reads {num_seqs + 1}")
    if num_seqs not in _rows_seen:
        _rows_seen.add(num_seqs)
        record(f"paged_attention_ragged rows={num_seqs}")
    wrong = _control_on()
    k_all, v_all = _tokens(key_cache), _tokens(value_cache)
    bounds = kv_indptr[: num_seqs + 1].tolist()
    for s in range(num_seqs):
        slots = _slots(kv_page_indices[bounds[s]:bounds[s + 1]].long(), block_size,
                       kv_last_page_lens, s)
        if wrong and slots.numel() > 1:
            slots = slots.clone()
            slots[0] = slots[1]
        o = _attend(query[s:s + 1], k_all[slots], v_all[slots], float(scale), None)
        out[s].copy_(o[0].to(out.dtype))


def _slots(pages: torch.Tensor, block_size: int, last_page_lens: torch.Tensor | None,
           s: int) -> torch.Tensor:
    """Sequence ``s``'s KV slots: its pages' tokens, the last page holding
    ``last_page_lens[s]`` of them (aiter reads that entry only when pages hold several tokens)."""
    if block_size == 1:
        return pages
    if last_page_lens is None or last_page_lens.numel() <= s:
        raise RuntimeError(f"aiter kernel double: row {s} reads kv_last_page_lens[{s}], which "
                           "the batch does not have")
    tokens = (pages[:, None] * block_size + torch.arange(block_size)[None, :]).reshape(-1)
    return tokens[: (pages.numel() - 1) * block_size + int(last_page_lens[s])]


def _control_on(var: str = WRONG_SLOT_FLAG_VAR) -> bool:
    return os.path.exists(os.environ.get(var) or "\0")


_device_flags: dict[torch.device, torch.Tensor] = {}


def refresh_control() -> None:
    """Set the GPU decode kernel's control flag from the flag file (outside graph capture)."""
    on = int(_control_on())
    for flag in _device_flags.values():
        flag.fill_(on)


def _gpu_paged_attention_ragged(out: torch.Tensor, workspace_buffer: torch.Tensor,
                                query: torch.Tensor, *args: Any, **kwargs: Any) -> None:
    from testkit.doubles import aiter_gpu_kernels

    num_seqs = query.shape[0]
    if num_seqs not in _rows_seen:
        _rows_seen.add(num_seqs)
        record(f"paged_attention_ragged rows={num_seqs}")
    flag = _device_flags.get(query.device)
    if flag is None:  # first seen outside a capture: sglang runs eager warm-up steps first
        flag = _device_flags[query.device] = torch.zeros(1, dtype=torch.int32,
                                                         device=query.device)
    if not torch.cuda.is_current_stream_capturing():
        refresh_control()
    aiter_gpu_kernels.paged_attention_ragged(out, workspace_buffer, query, *args,
                                             wrong_slot=flag, **kwargs)


def mha_batch_prefill_func(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
    kv_indptr: torch.Tensor, kv_page_indices: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int,
    *args: Any, softmax_scale: float | None = None, causal: bool = False,
    out: torch.Tensor | None = None, **kwargs: Any,
) -> torch.Tensor:
    batch = cu_seqlens_q.numel() - 1
    if kv_indptr.numel() != batch + 1:  # aiter's own shape check
        raise RuntimeError(f"kv_indptr must have shape [{batch + 1}], got {tuple(kv_indptr.shape)}")
    o = out if out is not None else torch.empty_like(q)
    scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    k_all, v_all = _tokens(k), _tokens(v)
    cu, ind = cu_seqlens_q.tolist(), kv_indptr.tolist()
    for b in range(batch):
        rows = q[cu[b]:cu[b + 1]]
        slots = kv_page_indices[ind[b]:ind[b + 1]].long()
        offset = slots.numel() - rows.shape[0] if causal else None
        o[cu[b]:cu[b + 1]] = _attend(rows, k_all[slots], v_all[slots], float(scale),
                                     offset).to(o.dtype)
    return o


def flash_attn_varlen_func(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor, max_seqlen_q: int, max_seqlen_k: int, dropout_p: float = 0.0,
    softmax_scale: float | None = None, logits_soft_cap: float = 0.0, causal: bool = False,
    *args: Any, return_lse: bool = False, **kwargs: Any,
) -> torch.Tensor:
    """aiter's varlen attention (the MHA extend of an MLA model): query rows
    ``cu_seqlens_q[b]:cu_seqlens_q[b + 1]`` attend to keys and values
    ``cu_seqlens_k[b]:cu_seqlens_k[b + 1]`` (``[tokens, heads, dim]``; values may be narrower
    than keys), causally aligned at the end (flash-attention's convention)."""
    if return_lse or dropout_p or logits_soft_cap or args:
        raise NotImplementedError("aiter kernel double: flash_attn_varlen_func takes no "
                                  "dropout, soft cap, LSE or later positional options here")
    batch = cu_seqlens_q.numel() - 1
    if cu_seqlens_k.numel() != batch + 1:
        raise RuntimeError(f"cu_seqlens_k must have shape [{batch + 1}], got "
                           f"{tuple(cu_seqlens_k.shape)}")
    out = q.new_empty(*q.shape[:-1], v.shape[-1])
    scale = softmax_scale if softmax_scale is not None else q.shape[-1] ** -0.5
    cq, ck = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    for b in range(batch):
        rows = q[cq[b]:cq[b + 1]]
        keys, values = k[ck[b]:ck[b + 1]], v[ck[b]:ck[b + 1]]
        offset = keys.shape[0] - rows.shape[0] if causal else None
        out[cq[b]:cq[b + 1]] = _attend(rows, keys, values, float(scale), offset).to(out.dtype)
    return out


def mla_decode_fwd(
    q: torch.Tensor, kv_buffer: torch.Tensor, o: torch.Tensor, qo_indptr: torch.Tensor,
    kv_indptr: torch.Tensor, kv_indices: torch.Tensor, kv_last_page_lens: torch.Tensor | None,
    max_seqlen_q: int, sm_scale: float | None = None, logit_cap: float = 0.0, *args: Any,
    **kwargs: Any,
) -> None:
    """aiter's MLA decode contract (page size 1): query rows ``qo_indptr[b]:qo_indptr[b + 1]``
    attend, causally, to the latent KV at ``kv_indices[kv_indptr[b]:kv_indptr[b + 1]]`` (one KV
    head shared by every query head); the values are the first ``o.shape[-1]`` entries."""
    batch = qo_indptr.numel() - 1
    if kv_indptr.numel() < batch + 1:
        raise RuntimeError(f"aiter kernel double: kv_indptr holds {kv_indptr.numel()} entries; "
                           f"a batch of {batch} reads {batch + 1}")
    if batch not in _mla_rows_seen:
        _mla_rows_seen.add(batch)
        record(f"mla_decode_fwd rows={batch}")
    wrong = _control_on(WRONG_MLA_SLOT_FLAG_VAR)
    latent = kv_buffer.reshape(-1, 1, kv_buffer.shape[-1])
    scale = float(sm_scale) if sm_scale is not None else q.shape[-1] ** -0.5
    value_dim = o.shape[-1]
    qo, kv = qo_indptr.tolist(), kv_indptr[: batch + 1].tolist()
    for b in range(batch):
        rows = q[qo[b]:qo[b + 1]]
        slots = kv_indices[kv[b]:kv[b + 1]].long()
        if wrong and slots.numel() > 1:
            slots = slots.clone()
            slots[0] = slots[1]
        keys = latent[slots]
        out = _attend(rows, keys, keys[..., :value_dim], scale, slots.numel() - rows.shape[0])
        o[qo[b]:qo[b + 1]] = out.to(o.dtype)


def recording_unified(kernel: Callable[..., Any], origin: str) -> Callable[..., Any]:
    """``kernel`` (aiter's real ``unified_attention``), recording each new number of sequences
    it is called for (``unified_attention from aiter <module> (<origin>) seqs=N``)."""
    seen: set[int] = set()

    def unified_attention(*args: Any, **kwargs: Any) -> Any:
        seqs = int(kwargs["seqused_k"].numel())
        if seqs not in seen:
            seen.add(seqs)
            record(f"unified_attention from aiter {origin} seqs={seqs}")
        return kernel(*args, **kwargs)

    return unified_attention


def recording_mla_stage1(stage1: Callable[..., Any], origin: str) -> Callable[..., Any]:
    """``stage1`` (the MLA decode's stage 1 that aiter's real ``mla.py`` calls), recording each
    new ``(batch, KV total)`` it is called for, as a graph capture or an eager decode
    (``aiter mla stage 1 from <origin> eager bs=8 total_kv=1234``): the key aiter's split-table
    cache is looked up with, besides the head count and dtype, which a server does not vary."""
    seen: set[tuple[bool, int, int]] = set()

    def mla_decode_stage1_asm_fwd(q: torch.Tensor, kv_buffer: torch.Tensor,
                                  qo_indptr: torch.Tensor, kv_indptr: torch.Tensor,
                                  kv_indices: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        capturing = torch.cuda.is_initialized() and (  # type: ignore[no-untyped-call]
            torch.cuda.is_current_stream_capturing())
        key = (capturing, int(qo_indptr.shape[0]) - 1, int(kv_indices.shape[0]))
        if key not in seen:
            seen.add(key)
            record(f"aiter mla stage 1 from {origin} {'captured' if capturing else 'eager'} "
                   f"bs={key[1]} total_kv={key[2]}")
        return stage1(q, kv_buffer, qo_indptr, kv_indptr, kv_indices, *args, **kwargs)

    return mla_decode_stage1_asm_fwd


def _refusing(name: str) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(
            f"aiter kernel double: {name} has no reference here (only paged_attention_ragged, "
            "mha_batch_prefill_func, unified_attention and, on CPU, flash_attn_varlen_func and "
            "mla.mla_decode_fwd)")

    refuse.__name__ = name.rsplit(".", 1)[-1]
    return refuse


class _StubModule(types.ModuleType):
    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _refusing(f"{self.__name__}.{attr}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Any ``aiter.*`` module not installed explicitly is a refusing stub package."""

    def find_spec(self, fullname: str, path: Sequence[str] | None = None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname == "aiter" or fullname.startswith("aiter."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name, "aiter kernel double (stub)")
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


def _module(name: str, **names: Any) -> types.ModuleType:
    module = _StubModule(name, "aiter kernel double")
    module.__path__ = []
    module.__dict__.update(names)
    sys.modules[name] = module
    parent, _, child = name.rpartition(".")
    if parent:
        setattr(sys.modules[parent], child, module)
    return module


def _make_kernel_repr(name: str, *args: Any, **kwargs: Any) -> Callable[..., str]:
    def kernel_repr(*a: Any, **k: Any) -> str:
        return name

    return kernel_repr


def install(*, unified: Callable[..., Any] | None = None, on_gpu: bool = False) -> None:
    """Put the stand-in ``aiter`` package in ``sys.modules`` (``unified``: the real Triton
    ``unified_attention`` to expose, when the unified path is under test; ``on_gpu``: the
    capture-safe GPU references for decode and extend)."""
    if isinstance(sys.modules.get("aiter"), _StubModule):
        return
    uni = unified or _refusing("unified_attention")
    if on_gpu:
        from testkit.doubles import aiter_gpu_kernels, aiter_mla_persistent

        # the varlen extend is the CPU double's (eager only: prefill graphs are off)
        _module("aiter", paged_attention_ragged=_gpu_paged_attention_ragged,
                mha_batch_prefill_func=aiter_gpu_kernels.mha_batch_prefill_func,
                flash_attn_varlen_func=flash_attn_varlen_func,
                get_mla_metadata_info_v1=aiter_mla_persistent.metadata_info,
                get_mla_metadata_v1=aiter_mla_persistent.metadata)
    else:
        _module("aiter", paged_attention_ragged=paged_attention_ragged,
                mha_batch_prefill_func=mha_batch_prefill_func,
                flash_attn_varlen_func=flash_attn_varlen_func)
        _module("aiter.mla", mla_decode_fwd=mla_decode_fwd)
    for name in ("aiter.ops", "aiter.ops.triton", "aiter.ops.triton.attention"):
        _module(name)
    _module("aiter.ops.triton.attention.unified_attention", unified_attention=uni)
    _module("aiter.ops.triton.unified_attention", unified_attention=uni)
    # what sglang's own Triton kernels import from aiter's utilities (an MI300's float8 types)
    _module("aiter.ops.triton.utils")
    _module("aiter.ops.triton.utils._triton")
    _module("aiter.ops.triton.utils._triton.kernel_repr", make_kernel_repr=_make_kernel_repr)
    _module("aiter.ops.triton.utils.types", e4m3_dtype=torch.float8_e4m3fnuz,
            e5m2_dtype=torch.float8_e5m2fnuz)
    sys.meta_path.append(_Finder())
