"""A tiny Qwen3 checkpoint written by the tests: seeded weights at a standard initialisation scale.

sglang's ``--load-format dummy`` weights are about +-1e-3, too small for attention to move the
logits; a real-looking checkpoint (every matrix N(0, 0.02), every norm weight 1, safetensors,
names as ``Qwen3ForCausalLM.load_weights`` expects) makes the attention output decide the tokens,
so a comparison of tokens and log-probabilities can see a wrong attention kernel.

Qwen3, not Llama: its attention splits heads by the attention-TP size, so it serves with
data-parallel attention on every release that has both (Llama splits by the full TP size).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import torch

__all__ = ["CONFIG", "mlp_and_norms", "save_checkpoint", "write_checkpoint"]

CONFIG: dict[str, object] = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "num_hidden_layers": 2,
    "max_position_embeddings": 1024,
    "vocab_size": 512,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "tie_word_embeddings": False,
    "attention_bias": False,
    "torch_dtype": "float32",
    "bos_token_id": 1,
    "eos_token_id": 2,
}
"""4 query and 2 KV heads: attention-TP 2 (``--tp 4 --attn-dp-size 2``) gives each rank 2 and 1."""

INIT_STD = 0.02


def _tensors(seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    hidden = int(CONFIG["hidden_size"])  # type: ignore[call-overload]
    inter = int(CONFIG["intermediate_size"])  # type: ignore[call-overload]
    heads = int(CONFIG["num_attention_heads"])  # type: ignore[call-overload]
    kv_heads = int(CONFIG["num_key_value_heads"])  # type: ignore[call-overload]
    head_dim = int(CONFIG["head_dim"])  # type: ignore[call-overload]
    vocab = int(CONFIG["vocab_size"])  # type: ignore[call-overload]

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * INIT_STD

    out = {"model.embed_tokens.weight": normal(vocab, hidden),
           "model.norm.weight": torch.ones(hidden),
           "lm_head.weight": normal(vocab, hidden)}
    for i in range(int(CONFIG["num_hidden_layers"])):  # type: ignore[call-overload]
        p = f"model.layers.{i}."
        out.update({
            p + "self_attn.q_proj.weight": normal(heads * head_dim, hidden),
            p + "self_attn.k_proj.weight": normal(kv_heads * head_dim, hidden),
            p + "self_attn.v_proj.weight": normal(kv_heads * head_dim, hidden),
            p + "self_attn.o_proj.weight": normal(hidden, heads * head_dim),
            p + "self_attn.q_norm.weight": torch.ones(head_dim),
            p + "self_attn.k_norm.weight": torch.ones(head_dim),
            **mlp_and_norms(p, normal, hidden, inter),
        })
    return out


def mlp_and_norms(prefix: str, normal: Callable[..., torch.Tensor], hidden: int,
                  inter: int) -> dict[str, torch.Tensor]:
    """A decoder layer's dense gated MLP and its two norms, under ``prefix``."""
    return {prefix + "mlp.gate_proj.weight": normal(inter, hidden),
            prefix + "mlp.up_proj.weight": normal(inter, hidden),
            prefix + "mlp.down_proj.weight": normal(hidden, inter),
            prefix + "input_layernorm.weight": torch.ones(hidden),
            prefix + "post_attention_layernorm.weight": torch.ones(hidden)}


def save_checkpoint(root: Path, config: dict[str, object],
                    tensors: dict[str, torch.Tensor]) -> Path:
    """Write ``config.json`` and ``model.safetensors`` under ``root``; return ``root``."""
    from safetensors.torch import save_file

    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(config, indent=1))
    save_file({k: v.contiguous() for k, v in tensors.items()},
              str(root / "model.safetensors"), metadata={"format": "pt"})
    return root


def write_checkpoint(root: Path, *, seed: int = 0) -> Path:
    """This Qwen3's ``config.json`` and ``model.safetensors`` under ``root``; return ``root``."""
    return save_checkpoint(root, CONFIG, _tensors(seed))
