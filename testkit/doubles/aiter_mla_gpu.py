"""aiter's own ``aiter/mla.py`` on an NVIDIA GPU, with only its HIP assembly stage 1 replaced.

``mla.py`` is Python and Triton around HIP kernels: its ``get_meta_param`` (the ``lru_cache`` of
split tables, aiter#4587) and its stage-2 reduce ``_fwd_kernel_stage2_asm`` (Triton, which reads
``num_kv_splits_indptr``) run unchanged on CUDA. :func:`load_mla` imports the file from an aiter
source tree as ``aiter.mla`` over stand-ins for what it imports from the rest of aiter:

* ``aiter.mla_decode_stage1_asm_fwd`` (HIP assembly in aiter): :func:`stage1`, a capture-safe
  torch double that writes what the assembly writes in non-persistent mode: per split of each
  request, the partial output and its log-sum-exp, into ``logits``/``attn_lse`` (or the final
  output where ``logits`` is the output itself, or where stage 2 copies a single split as the
  output), and each request's count of non-empty splits into ``valid_split_count``. It reads
  ``num_kv_splits_indptr`` on the device, as the assembly does, and never reads a device value
  on the host;
* the ROCm host (``aiter.jit.utils.chip_info``): an MI300X (gfx942, 304 compute units), the
  answer aiter's split-count choice reads; ``aiter.jit.core.is_experimental_enabled``: False;
* ``aiter.dtypes``: torch's types (``fp8``: ``torch.float8_e4m3fn``, the CUDA one);
* the persistent path (sglang's for an fp8 KV cache): stage 1 given ``work_meta_data``, and
  ``mla_reduce_v1`` and ``get_mla_decode_fwd_max_splits``, are the torch doubles of
  :mod:`testkit.doubles.aiter_mla_persistent` (its ``metadata``/``metadata_info`` stand in for
  the HIP schedule sglang's backend asks aiter for).

The stage-2 launch passes ``waves_per_eu``, an AMD-only option Triton's CUDA backend rejects; it
is dropped at the launch (``aiter_triton``), the kernel itself is unchanged.
"""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import torch

from testkit.doubles import aiter_mla_persistent as persistent
from testkit.doubles.aiter_triton import AiterTree, _drop_amd_options, _jit_kernels

__all__ = ["MLA_FILE", "load_mla", "stage1"]

MLA_FILE = "aiter/mla.py"
GFX = "gfx942"
COMPUTE_UNITS = persistent.COMPUTE_UNITS
MAX_TOKENS = 4096
"""The longest request :func:`stage1` attends over (its static token window per request)."""


def _group_size(nhead: int, max_seqlen_q: int, q_dtype: torch.dtype,
                kv_dtype: torch.dtype) -> int:
    """aiter's ``mgc``: stage 2 combines at most ``cdiv(seq_len, mgc)`` splits, so the assembly
    hands each split a whole number of ``mgc``-token groups."""
    fp8 = torch.float8_e4m3fn
    if nhead == 128 and q_dtype == fp8 and kv_dtype == fp8:
        return 32
    bf16 = torch.bfloat16
    if nhead == 64 and q_dtype == bf16 and kv_dtype == bf16 and max_seqlen_q == 1:
        return 32
    if nhead in (8, 16) and (max_seqlen_q == 1 or (nhead == 8 and max_seqlen_q == 2)):
        return 64
    return 16


def stage1(q: torch.Tensor, kv_buffer: torch.Tensor, qo_indptr: torch.Tensor,
           kv_indptr: torch.Tensor, kv_indices: torch.Tensor, kv_last_page_lens: Any,
           num_kv_splits_indptr: torch.Tensor, work_meta_data: Any, work_indptr: Any,
           work_info_set: Any, max_seqlen_q: int, page_size: int, nhead_kv: int,
           sm_scale: float, logits: torch.Tensor, attn_lse: torch.Tensor, o: torch.Tensor,
           final_lse: Any, q_scale: Any = None, kv_scale: Any = None, *rest: Any) -> None:
    """MLA decode stage 1, one query token per request, page size 1 (persistent where
    ``work_meta_data`` is given: :func:`testkit.doubles.aiter_mla_persistent.stage1`)."""
    if max_seqlen_q != 1 or page_size != 1:
        raise NotImplementedError("aiter MLA stage-1 double: one query token, page size 1 only")
    if work_meta_data is not None:
        persistent.stage1(q, kv_buffer, kv_indices, work_indptr, work_info_set, sm_scale,
                          logits, attn_lse, o, q_scale, kv_scale)
        return
    bs, nhead, splits, value_dim = q.shape[0], o.shape[1], logits.shape[1], o.shape[-1]
    window = min(int(kv_indices.numel()), MAX_TOKENS)
    group = _group_size(nhead, max_seqlen_q, q.dtype, kv_buffer.dtype)
    start, lens = kv_indptr[:bs], kv_indptr[1:bs + 1] - kv_indptr[:bs]
    count = (num_kv_splits_indptr[1:bs + 1] - num_kv_splits_indptr[:bs]).clamp(min=1)
    per_split = (lens + count - 1) // count
    chunk = ((per_split + group - 1) // group).clamp(min=1) * group  # tokens per split
    pos = torch.arange(window, device=q.device)
    valid = pos[None, :] < lens[:, None]
    where = (start[:, None] + pos[None, :]).clamp(max=kv_indices.numel() - 1)
    latent = kv_buffer.reshape(-1, kv_buffer.shape[-1])
    keys = latent[kv_indices[where].long()].float()  # [bs, window, dim]
    scores = torch.einsum("bhd,btd->bht", q.float(), keys) * float(sm_scale)
    split_of = pos[None, :] // chunk[:, None]  # [bs, window]
    outputs, lses = [], []
    for s in range(splits):
        mask = (valid & (split_of == s))[:, None, :]
        masked = scores.masked_fill(~mask, float("-inf"))
        lse = torch.logsumexp(masked, dim=-1)  # [bs, heads]: -inf for an empty split
        weights = torch.exp(masked - lse.nan_to_num(neginf=0.0)[..., None])
        outputs.append(torch.einsum("bht,btd->bhd", weights, keys[..., :value_dim]))
        lses.append(lse)
    if len(rest) >= 4 and isinstance(rest[3], torch.Tensor):  # valid_split_count
        rest[3][:bs].copy_(((lens + chunk - 1) // chunk).to(rest[3].dtype))
    if splits == 1 and logits.dtype != o.dtype and nhead not in (8, 16):
        # stage 2 copies the one split as the output, reading ``logits`` as the output's type
        logits.view(-1).view(o.dtype)[: bs * nhead * value_dim].view(bs, nhead, value_dim) \
            .copy_(outputs[0].to(o.dtype))
        return
    for s in range(splits):
        logits[:bs, s].copy_(outputs[s].to(logits.dtype))
        attn_lse[:bs, s, :, 0].copy_(lses[s])


def _module(name: str, **names: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(names)
    return module


def load_mla(tree: AiterTree) -> types.ModuleType:
    """``aiter/mla.py`` from ``tree``, imported as ``aiter.mla`` over the stand-ins above.
    ``sys.modules`` is as before on return; the module keeps what it imported."""
    path = tree.root / MLA_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: pass the folder that holds aiter/mla.py")
    dtypes = _module("aiter.dtypes", fp8=torch.float8_e4m3fn, bf16=torch.bfloat16,
                     fp16=torch.float16, fp32=torch.float32, i32=torch.int32)
    package = _module("aiter", dtypes=dtypes, mla_decode_stage1_asm_fwd=stage1,
                      mla_reduce_v1=persistent.reduce)
    package.__path__ = [str(tree.root / "aiter")]
    stand_ins = {
        "aiter": package, "aiter.dtypes": dtypes,
        "aiter.jit": _module("aiter.jit"),
        "aiter.jit.core": _module("aiter.jit.core", is_experimental_enabled=lambda *a: False),
        "aiter.jit.utils": _module("aiter.jit.utils"),
        "aiter.jit.utils.chip_info": _module("aiter.jit.utils.chip_info",
                                             get_cu_num=lambda: COMPUTE_UNITS,
                                             get_gfx=lambda: GFX),
        "aiter.ops": _module("aiter.ops"),
        "aiter.ops.attention": _module(
            "aiter.ops.attention",
            get_mla_decode_fwd_max_splits=persistent.max_splits),
    }
    names = [*stand_ins, "aiter.mla"]
    saved = {name: sys.modules[name] for name in names if name in sys.modules}
    spec = importlib.util.spec_from_file_location("aiter.mla", Path(path))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as a module")
    module = importlib.util.module_from_spec(spec)
    try:
        sys.modules.update(stand_ins)
        sys.modules["aiter.mla"] = module
        spec.loader.exec_module(module)
    finally:
        for name in names:
            sys.modules.pop(name, None)
        sys.modules.update(saved)
    for kernel in _jit_kernels(module):
        _drop_amd_options(kernel)
    return module
