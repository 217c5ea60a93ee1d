"""A stand-in for sglang's ``ModelRunner``: only the attributes an attention backend reads.

Everything it holds is real sglang: the ``ServerArgs`` from sglang's own parser, the
``ModelConfig`` read from a config-only model directory, ``ReqToTokenPool``, the KV pool and the
token allocator. Only the runner object itself (which would load weights and start distributed
groups) is a stand-in.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["ModelRunnerStandIn", "build_model_runner"]


@dataclass
class ModelRunnerStandIn:
    server_args: Any
    model_config: Any
    req_to_token_pool: Any
    token_to_kv_pool: Any
    token_to_kv_pool_allocator: Any
    device: str
    kv_cache_dtype: torch.dtype
    dtype: torch.dtype
    page_size: int
    sliding_window_size: int | None = None
    is_draft_worker: bool = False
    decode_attention_backend_str: str = "aiter"
    prefill_attention_backend_str: str = "aiter"
    kv_index_translator: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


def _kwargs_for(cls: Any, **candidates: Any) -> dict[str, Any]:
    """The candidates ``cls.__init__`` accepts (constructor signatures vary by release)."""
    return _kwargs_for_function(cls.__init__, **candidates)


def _kv_cache_dtype(server_args: Any, model_dtype: torch.dtype) -> torch.dtype:
    """The KV pool's element type for ``--kv-cache-dtype``, by sglang's own rule (``auto``: the
    model's type; no weights are loaded, so no checkpoint's KV quantization applies)."""
    choice = str(getattr(server_args, "kv_cache_dtype", "auto") or "auto")
    if choice == "auto":
        return model_dtype
    try:
        from sglang.srt.mem_cache import kv_cache_dtype as rule
    except ImportError:  # older releases: a ModelRunner method
        from types import SimpleNamespace

        from sglang.srt.model_executor.model_runner import ModelRunner

        holder = SimpleNamespace(server_args=server_args, model=None, dtype=model_dtype)
        ModelRunner.configure_kv_cache_dtype(holder)
        resolved: torch.dtype = holder.kv_cache_dtype
        return resolved
    fn = rule.configure_kv_cache_dtype
    _, resolved = fn(**_kwargs_for_function(
        fn, server_args_kv_cache_dtype=choice, model=None, model_dtype=model_dtype,
        is_draft_worker=False, is_dflash=False, speculative_draft_attention_backend=None,
        speculative_draft_kv_cache_dtype=None))
    return resolved


def _kwargs_for_function(fn: Any, **candidates: Any) -> dict[str, Any]:
    accepted = inspect.signature(fn).parameters
    return {k: v for k, v in candidates.items() if k in accepted}


def build_model_runner(
    server_args: Any, pool_size: int, device: str = "cpu", *, attn_tp_size: int = 1
) -> ModelRunnerStandIn:
    """A runner stand-in over real sglang pools of ``pool_size`` requests for ``server_args``.

    ``attn_tp_size``: the attention-TP size of the rank; its KV pool holds that rank's share of
    the KV heads, as sglang's model runner sizes it.
    """
    from sglang.srt.configs.model_config import AttentionArch, ModelConfig
    from sglang.srt.mem_cache.memory_pool import (
        MHATokenToKVPool,
        MLATokenToKVPool,
        ReqToTokenPool,
    )

    try:
        from sglang.srt.mem_cache.allocator.token import TokenToKVPoolAllocator
    except ImportError:  # older layout
        from sglang.srt.mem_cache.allocator import TokenToKVPoolAllocator

    model_config = ModelConfig.from_server_args(server_args)
    dtype = model_config.dtype
    kv_dtype = _kv_cache_dtype(server_args, dtype)
    page_size = int(server_args.page_size or 1)
    context = int(model_config.context_len)
    req_pool = ReqToTokenPool(
        **_kwargs_for(
            ReqToTokenPool,
            size=pool_size,
            max_context_len=context + 4,
            device=device,
            enable_memory_saver=False,
        )
    )
    kv_size = pool_size * 64
    layers = int(model_config.num_hidden_layers)
    if model_config.attention_arch == AttentionArch.MLA:
        kv_pool = MLATokenToKVPool(
            **_kwargs_for(
                MLATokenToKVPool,
                size=kv_size,
                page_size=page_size,
                dtype=kv_dtype,
                kv_lora_rank=model_config.kv_lora_rank,
                qk_rope_head_dim=model_config.qk_rope_head_dim,
                layer_num=layers,
                device=device,
                enable_memory_saver=False,
            )
        )
    else:
        kv_pool = MHATokenToKVPool(
            **_kwargs_for(
                MHATokenToKVPool,
                size=kv_size,
                page_size=page_size,
                dtype=kv_dtype,
                head_num=model_config.get_num_kv_heads(attn_tp_size),
                head_dim=model_config.head_dim,
                layer_num=layers,
                device=device,
                enable_memory_saver=False,
                enable_alt_stream=False,
            )
        )
    allocator = TokenToKVPoolAllocator(
        **_kwargs_for(
            TokenToKVPoolAllocator,
            size=kv_size,
            dtype=kv_dtype,
            device=device,
            kvcache=kv_pool,
            need_sort=False,
        )
    )
    runner = ModelRunnerStandIn(
        server_args=server_args,
        model_config=model_config,
        req_to_token_pool=req_pool,
        token_to_kv_pool=kv_pool,
        token_to_kv_pool_allocator=allocator,
        device=device,
        kv_cache_dtype=kv_dtype,
        dtype=dtype,
        page_size=page_size,
    )
    try:
        from sglang.srt.mem_cache.kv_index_translator import KVIndexTranslator
    except ImportError:  # releases before 0.5.2x read req_to_token directly
        return runner
    runner.kv_index_translator = KVIndexTranslator(
        **_kwargs_for(
            KVIndexTranslator,
            req_to_token=req_pool.req_to_token,
            token_to_kv_pool_allocator=allocator,
            token_to_kv_pool=kv_pool,
            page_size=page_size,
            device=device,
            is_draft_worker=False,
        )
    )
    return runner
