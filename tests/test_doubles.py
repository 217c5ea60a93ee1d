"""Every test double is listed, with what it stands in for, in ``testkit.doubles.DOUBLES``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testkit.doubles import DOUBLES


def test_every_double_module_is_listed_and_every_listed_double_exists() -> None:
    folder = Path(__file__).resolve().parents[1] / "testkit" / "doubles"
    modules = {p.stem for p in folder.glob("*.py") if p.stem != "__init__"}
    assert modules == set(DOUBLES)
    for name, what in DOUBLES.items():
        assert what.strip(), name


def test_aiters_own_mla_py_loads_with_only_its_hip_stage_1_a_double() -> None:
    """``aiter_mla_gpu.load_mla`` (the ``mla`` server double, the GPU evidence): the module is
    aiter's own file, its ``get_meta_param`` aiter's cache, its stage 1 the torch double."""
    import pytest

    from testkit.doubles.aiter_mla_gpu import load_mla
    from testkit.doubles.aiter_triton import installed_tree

    tree = installed_tree()
    if tree is None or not (tree.root / "aiter" / "mla.py").is_file():
        pytest.skip("amd-aiter (with aiter/mla.py) is not installed: bash tools/env.sh")
    module = load_mla(tree)
    assert Path(str(module.__file__)).resolve() == (tree.root / "aiter/mla.py").resolve()
    assert module.get_meta_param.cache_parameters()["maxsize"] is not None  # aiter's lru_cache
    assert module.aiter.mla_decode_stage1_asm_fwd.__module__ == "testkit.doubles.aiter_mla_gpu"


def _persistent_case(bs: int, buffer_bs: int, heads: int, fast_mode: bool,
                     seed: int = 0) -> tuple[Any, Any, Any, Any, list[Any]]:
    """A decode batch of ``bs`` requests over buffers sized for ``buffer_bs`` (as a graph's are),
    its schedule written by the metadata double: (q, latent, kv_indptr, kv_indices, buffers)."""
    import torch

    from testkit.doubles import aiter_mla_persistent as persistent

    gen = torch.Generator().manual_seed(seed)
    lens = torch.randint(1, 200, (bs,), generator=gen)
    kv_indptr = torch.zeros(bs + 1, dtype=torch.int32)
    kv_indptr[1:] = lens.cumsum(0)
    kv_indices = torch.randperm(8000, generator=gen)[: int(kv_indptr[-1])].to(torch.int32)
    latent = torch.randn(8000, 1, 1, 80, generator=gen)
    q = torch.randn(bs, heads, 80, generator=gen)
    info = persistent.metadata_info(buffer_bs, 1, heads, torch.bfloat16, torch.bfloat16, False,
                                    fast_mode=fast_mode, num_kv_splits=64,
                                    intra_batch_mode=not fast_mode)
    buffers = [torch.full(shape if isinstance(shape, tuple) else (shape,), 7, dtype=dtype)
               for shape, dtype in info]
    work_metadata, work_indptr, work_info, reduce_indptr, final_map, partial_map = buffers
    persistent.metadata(torch.arange(bs + 1, dtype=torch.int32), kv_indptr,
                        torch.ones(bs, dtype=torch.int32), heads, 1, False, work_metadata,
                        work_info, work_indptr, reduce_indptr, final_map, partial_map,
                        kv_granularity=16, max_seqlen_qo=1, max_split_per_batch=64)
    return q, latent, kv_indptr, kv_indices, buffers


def _attention(q: Any, latent: Any, kv_indptr: Any, kv_indices: Any, scale: float,
               value_dim: int) -> Any:
    import torch

    rows = []
    flat = latent.reshape(-1, latent.shape[-1])
    for b in range(q.shape[0]):
        keys = flat[kv_indices[kv_indptr[b]:kv_indptr[b + 1]].long()]
        weights = torch.softmax(q[b] @ keys.T * scale, dim=-1)
        rows.append(weights @ keys[:, :value_dim])
    return torch.stack(rows)


def test_the_persistent_mla_doubles_compute_attention_through_their_own_schedule(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``aiter_mla_persistent`` (the fp8-KV path on the GPU): the schedule the metadata double
    writes, read by its stage 1 and reduce, gives each request's attention, with requests split
    across partial slots and buffers sized for more requests than the batch (a graph's), in both
    of sglang's buffer layouts (intra-batch for 16 heads, fast mode for 128)."""
    import torch

    from testkit.doubles import aiter_mla_persistent as persistent

    monkeypatch.setattr(persistent, "MAX_TOKENS", 256)  # the longest request here: 199 tokens
    for bs, buffer_bs, heads, fast in ((5, 8, 16, False), (6, 6, 128, True),
                                       (2, 34, 16, False), (33, 34, 128, True)):
        q, latent, kv_indptr, kv_indices, buffers = _persistent_case(bs, buffer_bs, heads, fast)
        _, work_indptr, work_info, reduce_indptr, final_map, partial_map = buffers
        split = int((reduce_indptr[1:] - reduce_indptr[:-1] > 0).sum())
        assert 0 < split <= bs  # some requests take several partial slots
        logits = torch.full((partial_map.numel(), 1, heads, 64), float("nan"))
        lse = torch.full((partial_map.numel(), 1, heads, 1), float("nan"))
        o = torch.full((bs, heads, 64), float("nan"))
        persistent.stage1(q, latent, kv_indices, work_indptr, work_info, 0.1, logits, lse, o)
        persistent.reduce(logits, lse, reduce_indptr, final_map, partial_map, 1, 64, o)
        want = _attention(q, latent, kv_indptr, kv_indices, 0.1, 64)
        assert torch.allclose(o, want, atol=1e-4), float((o - want).abs().max())
    with pytest.raises(ValueError, match="buffers sized for 4 tiles"):
        _persistent_case(5, 4, 16, False)

