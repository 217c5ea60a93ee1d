"""The launches of the attention-backend tests: tiny local models, one resolution per backend.

Each model is a ``config.json`` only (no weights, no tokenizer: ``skip_tokenizer_init``), written
under ``tmp_path``. A launch is resolved exactly as sglang's launcher does it in the installed
release (``ServerArgs(...)``, then ``resolve_once()`` where it exists), on a simulated MI300X,
with the process environment restored afterwards so that two runs start from the same state.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sglang_aiter_plugin.fixes.attention_backend.choice import SELECTED_ENV
from testkit.doubles.rocm_platform import simulated_rocm

__all__ = [
    "LAUNCHES",
    "Launch",
    "Outcome",
    "Resolutions",
    "resolve",
    "resolve_args",
    "warm_up",
    "write_models",
]

_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 8,
    "num_key_value_heads": 8,
    "num_hidden_layers": 2,
    "vocab_size": 1024,
    "rms_norm_eps": 1e-5,
    "torch_dtype": "bfloat16",
}
_DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
    "hidden_size": 256,
    "intermediate_size": 512,
    "moe_intermediate_size": 128,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "num_hidden_layers": 2,
    "first_k_dense_replace": 1,
    "n_routed_experts": 8,
    "n_shared_experts": 1,
    "num_experts_per_tok": 2,
    "n_group": 1,
    "topk_group": 1,
    "kv_lora_rank": 64,
    "q_lora_rank": 96,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 16,
    "v_head_dim": 32,
    "num_nextn_predict_layers": 1,
    "max_position_embeddings": 32768,
    "vocab_size": 1024,
    "rms_norm_eps": 1e-6,
    "torch_dtype": "bfloat16",
}
MODELS: dict[str, dict[str, Any]] = {
    "llama-4k": {**_LLAMA, "max_position_embeddings": 4096},
    "llama-32k": {**_LLAMA, "max_position_embeddings": 32768},
    "llama-eagle-draft": {
        **_LLAMA,
        "architectures": ["LlamaForCausalLMEagle"],
        "num_hidden_layers": 1,
        "max_position_embeddings": 32768,
    },
    "gpt-oss": {
        "architectures": ["GptOssForCausalLM"],
        "model_type": "gpt_oss",
        "hidden_size": 256,
        "intermediate_size": 256,
        "num_attention_heads": 8,
        "num_key_value_heads": 8,
        "head_dim": 32,
        "num_hidden_layers": 2,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"],
        "max_position_embeddings": 32768,
        "vocab_size": 1024,
        "rms_norm_eps": 1e-5,
        "torch_dtype": "bfloat16",
    },
    "llama4": {
        **_LLAMA,
        "architectures": ["Llama4ForCausalLM"],
        "model_type": "llama4_text",
        "head_dim": 32,
        "num_local_experts": 4,
        "num_experts_per_tok": 1,
        "intermediate_size_mlp": 512,
        "max_position_embeddings": 32768,
    },
    "gemma4": {
        **_LLAMA,
        "architectures": ["Gemma4ForCausalLM"],
        "model_type": "gemma4_text",
        "allow_global_per_layer_attribute_access": True,
        "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"],
        "max_position_embeddings": 32768,
    },
    "deepseek-v3": _DEEPSEEK_V3,
}


def write_models(root: Path) -> dict[str, str]:
    """Write every model directory under ``root``; return name -> path."""
    paths = {}
    for name, config in MODELS.items():
        directory = root / name
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "config.json").write_text(json.dumps(config), encoding="utf-8")
        paths[name] = str(directory)
    return paths


@dataclasses.dataclass(frozen=True)
class Launch:
    """One launch; ``args(models, backend)`` gives the ``ServerArgs`` keyword arguments."""

    name: str
    args: Callable[[dict[str, str], str], dict[str, Any]]
    env: tuple[tuple[str, str], ...] = ()


def _single(model: str, **extra: Any) -> Callable[[dict[str, str], str], dict[str, Any]]:
    return lambda m, b: {"model_path": m[model], "attention_backend": b, **extra}


def _split(model: str) -> Callable[[dict[str, str], str], dict[str, Any]]:
    return lambda m, b: {
        "model_path": m[model],
        "prefill_attention_backend": b,
        "decode_attention_backend": b,
    }


def _eagle(m: dict[str, str], b: str) -> dict[str, Any]:
    return {
        "model_path": m["llama-32k"],
        "attention_backend": b,
        "speculative_algorithm": "EAGLE",
        "speculative_draft_model_path": m["llama-eagle-draft"],
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
    }


def _mtp(m: dict[str, str], b: str) -> dict[str, Any]:
    return {
        "model_path": m["deepseek-v3"],
        "attention_backend": b,
        "speculative_algorithm": "EAGLE",
        "speculative_num_steps": 1,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 2,
    }


HONOR = (("SGLANG_AITER_HONOR_EXPLICIT_MEM_FRACTION", "1"),)
LAUNCHES = (
    Launch("llama-4k", _single("llama-4k")),
    Launch("llama-32k", _single("llama-32k")),
    Launch("llama-32k-explicit-mem", _single("llama-32k", mem_fraction_static=0.8)),
    Launch("llama-32k-explicit-mem-honored", _single("llama-32k", mem_fraction_static=0.8), HONOR),
    Launch("gpt-oss", _single("gpt-oss")),
    Launch("llama4", _single("llama4")),
    Launch("gemma4", _single("gemma4")),
    Launch("deepseek-v3", _single("deepseek-v3")),
    Launch("deepseek-v3-split", _split("deepseek-v3")),
    Launch("llama-eagle", _eagle),
    Launch("deepseek-v3-mtp", _mtp),
    Launch("llama-deterministic", _single("llama-4k", enable_deterministic_inference=True)),
    Launch("dummy", lambda m, b: {"model_path": "dummy", "attention_backend": b}),
)
COMMON = {"device": "cuda", "skip_tokenizer_init": True, "random_seed": 0}
IGNORED_FIELDS = frozenset({"launch_command"})
PLUGIN_SOURCE = "sglang_aiter_plugin"


@dataclasses.dataclass
class Outcome:
    """What one resolution produced: the resolved record or the exception, and side effects."""

    record: Any = None
    error: BaseException | None = None
    env_writes: dict[str, str | None] = dataclasses.field(default_factory=dict)

    def config(self) -> dict[str, Any]:
        """Every resolved field as sglang publishes it (``/server_info``), minus the command."""
        record = self.record
        if hasattr(record, "resolved_dict"):
            values = dict(record.resolved_dict())
        else:
            values = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}
        return {k: v for k, v in values.items() if k not in IGNORED_FIELDS}

    def sources(self) -> list[str]:
        """Declaration sources in order, the plugin's own fold left out."""
        stash = getattr(self.record, "_resolved_overrides", None) or []
        return [str(source) for source, _ in stash if source != PLUGIN_SOURCE]

    def error_signature(self) -> tuple[str, str] | None:
        return None if self.error is None else (type(self.error).__name__, str(self.error))


def warm_up(models: dict[str, str]) -> None:
    """Import what resolution imports, on this (CPU) platform, before any simulated launch.

    Some sglang modules probe the GPU when first imported; imported inside a simulated ROCm
    block they would ask torch for a device that is not there.
    """
    from sglang.srt.server_args import ServerArgs

    saved = dict(os.environ)
    try:
        for model in ("llama-32k", "deepseek-v3"):
            record = ServerArgs(
                model_path=models[model], device="cpu", attention_backend="triton",
                skip_tokenizer_init=True,
            )
            if hasattr(record, "resolve_once"):
                record.resolve_once()
    finally:
        os.environ.clear()
        os.environ.update(saved)


def resolve(launch: Launch, models: dict[str, str], backend: str) -> Outcome:
    """Resolve ``launch`` with ``backend`` as the launcher would; never raises."""
    return resolve_args({**COMMON, **launch.args(models, backend)}, dict(launch.env))


def resolve_args(kwargs: dict[str, Any], env: dict[str, str] | None = None) -> Outcome:
    """Resolve ``ServerArgs(**kwargs)`` as the launcher would, with ``env`` set; never raises."""
    from sglang.srt.server_args import ServerArgs

    saved = dict(os.environ)
    os.environ.update(env or {})
    os.environ.pop(SELECTED_ENV, None)  # as in a fresh launcher: both runs start alike
    before = dict(os.environ)
    outcome = Outcome()
    try:
        with simulated_rocm():
            record = ServerArgs(**kwargs)
            if hasattr(record, "resolve_once"):
                record.resolve_once()
        outcome.record = record
    except Exception as exc:
        outcome.error = exc
    finally:
        after = dict(os.environ)
        outcome.env_writes = {
            k: after.get(k) for k in set(before) | set(after) if before.get(k) != after.get(k)
        }
        os.environ.clear()
        os.environ.update(saved)
    return outcome


class Resolutions:
    """``get(name, backend)``: the launch resolved with that backend, once per session."""

    def __init__(self, models: dict[str, str]) -> None:
        self.models = models
        self._cache: dict[tuple[str, str], Outcome] = {}

    def get(self, name: str, backend: str) -> Outcome:
        key = (name, backend)
        if key not in self._cache:
            launch = next(launch for launch in LAUNCHES if launch.name == name)
            self._cache[key] = resolve(launch, self.models, backend)
        return self._cache[key]
