"""A tiny DeepSeek-V2 checkpoint written by the tests: multi-head latent attention (MLA) with
DeepSeek's attention shapes, seeded weights at a standard initialisation scale.

The attention is DeepSeek-V2/V3's per rank at TP 8: 16 query heads, a latent of
``kv_lora_rank`` 512 plus a rotary part of 64 per token (576 in the KV cache), no-rope query/key
parts of 128 and values of 128, no query compression (``q_lora_rank`` null, as DeepSeek-V2-Lite).
Rotary embedding as DeepSeek's (YaRN, which sglang's CPU rope requires: ``get_rope_cpu`` accepts
``deepseek_yarn`` only), over a short context. Everything else is small: 2 layers, hidden size
128, a vocabulary of 512. Every layer is dense
(``first_k_dense_replace`` = the layer count; the config still names a few routed experts, which
sglang's weight loader counts even when no layer has any).

As :mod:`testkit.tiny_checkpoint`: every matrix N(0, 0.02) from a fixed seed, every norm weight 1,
float32 safetensors, names as sglang's ``DeepseekV2ForCausalLM.load_weights`` expects
(``q_proj``, ``kv_a_proj_with_mqa``, ``kv_a_layernorm``, ``kv_b_proj``, ``o_proj``; the MLP's
``gate_proj``/``up_proj``/``down_proj``).
"""

from __future__ import annotations

from pathlib import Path

import torch

from testkit.tiny_checkpoint import mlp_and_norms, save_checkpoint

__all__ = ["CONFIG", "write_checkpoint"]

CONFIG: dict[str, object] = {
    "architectures": ["DeepseekV2ForCausalLM"],
    "model_type": "deepseek_v2",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "kv_lora_rank": 512,
    "q_lora_rank": None,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "num_hidden_layers": 2,
    "first_k_dense_replace": 2,
    "moe_layer_freq": 1,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "moe_intermediate_size": 64,
    "topk_method": "greedy",
    "hidden_act": "silu",
    "max_position_embeddings": 1024,
    "vocab_size": 512,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 256,
                     "beta_fast": 32, "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
    "tie_word_embeddings": False,
    "attention_bias": False,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
}

INIT_STD = 0.02


def _dim(name: str) -> int:
    value = CONFIG[name]
    assert isinstance(value, int), (name, value)
    return value


def _tensors(seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    hidden, inter, vocab = _dim("hidden_size"), _dim("intermediate_size"), _dim("vocab_size")
    heads, latent = _dim("num_attention_heads"), _dim("kv_lora_rank")
    nope, rope, value = _dim("qk_nope_head_dim"), _dim("qk_rope_head_dim"), _dim("v_head_dim")

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * INIT_STD

    out = {"model.embed_tokens.weight": normal(vocab, hidden),
           "model.norm.weight": torch.ones(hidden),
           "lm_head.weight": normal(vocab, hidden)}
    for i in range(_dim("num_hidden_layers")):
        p = f"model.layers.{i}."
        out.update({
            p + "self_attn.q_proj.weight": normal(heads * (nope + rope), hidden),
            p + "self_attn.kv_a_proj_with_mqa.weight": normal(latent + rope, hidden),
            p + "self_attn.kv_a_layernorm.weight": torch.ones(latent),
            p + "self_attn.kv_b_proj.weight": normal(heads * (nope + value), latent),
            p + "self_attn.o_proj.weight": normal(hidden, heads * value),
            **mlp_and_norms(p, normal, hidden, inter),
        })
    return out


def write_checkpoint(root: Path, *, seed: int = 0) -> Path:
    """This model's ``config.json`` and ``model.safetensors`` under ``root``; return ``root``."""
    return save_checkpoint(root, CONFIG, _tensors(seed))
