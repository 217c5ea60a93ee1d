"""sglang configured as in a scheduler: real parser, real publication, real capture sizes.

A config-only model in a folder (no weights), sglang's own ``prepare_server_args``, the server
arguments published as a scheduler publishes them, a model runner stand-in over sglang's real
pools (:mod:`.model_runner`) and the decode graph sizes sglang's ``get_batch_sizes_to_capture``
gives. Importing this module imports neither torch nor sglang.
"""

from __future__ import annotations

import contextlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import Version

from sglang_aiter_plugin._errors import AiterExtError

__all__ = ["SCENARIOS", "Scenario", "Setup", "SglangMissingError", "configure", "graphs_off",
           "server_argv", "write_model_dir"]


class SglangMissingError(AiterExtError, RuntimeError):
    """sglang is not installed: there is nothing to configure a case with."""

POOL = 33
"""Request-pool size P: odd, so both alignments (2 and attn_tp_size 2) pad the graph max_bs."""

CAPTURE_LIST = ("1", "2", "4", "8", "16", "24", "32", "48", "64")
"""Decode graph sizes asked for; sglang filters them by the alignment and adds the padded P."""

_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 256,
    "intermediate_size": 512,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "num_hidden_layers": 2,
    "max_position_embeddings": 2048,
    "vocab_size": 1024,
    "rms_norm_eps": 1e-6,
    "torch_dtype": "bfloat16",
}


_DEEPSEEK_V2 = {
    "architectures": ["DeepseekV2ForCausalLM"],
    "model_type": "deepseek_v2",
    "hidden_size": 256,
    "intermediate_size": 512,
    "moe_intermediate_size": 128,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "kv_lora_rank": 64,
    "q_lora_rank": None,
    "qk_nope_head_dim": 32,
    "qk_rope_head_dim": 16,
    "v_head_dim": 32,
    "num_hidden_layers": 2,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "first_k_dense_replace": 1,
    "max_position_embeddings": 2048,
    "vocab_size": 1024,
    "rms_norm_eps": 1e-6,
    "torch_dtype": "bfloat16",
}


_AITER_MLA_DIMS = {
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
}
"""DeepSeek-V2/V3's attention dimensions, the ones aiter's MLA decode kernels are built for
(a latent of 512 + 64 per token, 16 query heads per rank)."""


def write_model_dir(root: Path, *, mla: bool = False, aiter_mla_dims: bool = False) -> Path:
    """A config-only model directory (no weights): enough for sglang's ``ModelConfig``.

    ``mla``: a small DeepSeek-V2-shaped config (multi-head latent attention) instead of Llama;
    ``aiter_mla_dims``: with it, the attention dimensions aiter's MLA kernels take.
    """
    root.mkdir(parents=True, exist_ok=True)
    config = dict(_LLAMA)
    if mla:
        config = {**_DEEPSEEK_V2, **(_AITER_MLA_DIMS if aiter_mla_dims else {})}
    (root / "config.json").write_text(json.dumps(config))
    return root


@dataclass(frozen=True)
class Scenario:
    name: str
    new_flags: tuple[str, ...]
    """Flags for 0.5.22+ (``--attn-dp-size``, which earlier parsers do not know)."""
    old_flags: tuple[str, ...]
    """Flags for older releases (``--dp-size`` with ``--enable-dp-attention``)."""
    attn_tp_size: int
    attn_dp_size: int | None = None
    """Attention-DP size; ``None``: 2 where attention TP is above 1 (DP attention over two groups,
    as the scenarios here configure it), else 1."""

    @property
    def dp(self) -> int:
        if self.attn_dp_size is not None:
            return self.attn_dp_size
        return 2 if self.attn_tp_size > 1 else 1


SCENARIOS = {
    "two-batch-overlap": Scenario(
        "two-batch-overlap", ("--enable-two-batch-overlap",), ("--enable-two-batch-overlap",), 1
    ),
    "dp-attention": Scenario(
        "dp-attention",
        ("--tp", "4", "--attn-dp-size", "2"),
        ("--tp", "4", "--dp-size", "2", "--enable-dp-attention"),
        2,
    ),
}
"""The configurations the self-test's cases take: two-batch overlap (pads the graph sizes) and DP
attention at attention-TP 2 (MLP sync pads the eager batches)."""


@dataclass
class Setup:
    server_args: Any
    runner: Any
    capture_bs: list[int]
    scope: contextlib.ExitStack

    @property
    def max_bs(self) -> int:
        return max(self.capture_bs)


def _sglang_version() -> Version:
    from sglang_aiter_plugin._sglang import installed_sglang_version

    v = installed_sglang_version()
    if v is None:
        raise SglangMissingError(f"sglang is not installed for this Python ({sys.executable}): "
                                 "the self-test builds its cases through sglang; install a "
                                 "supported release (sglang-aiter-plugin doctor lists them)")
    return Version(v.base_version)


def configure(
    model_dir: Path,
    scenario: Scenario,
    extra: tuple[str, ...] = (),
    *,
    device: str = "cpu",
    pool: int = POOL,
    capture: tuple[str, ...] | None = CAPTURE_LIST,
) -> Setup:
    """Parse, publish and size as a scheduler would; return the runner stand-in and the capture
    sizes (``capture``: the decode graph sizes asked for; ``None``: sglang's own choice from the
    flags). Leave ``Setup.scope`` to undo the publication's overrides."""
    from sglang.srt.server_args import prepare_server_args

    from sglang_aiter_plugin.selftest.model_runner import build_model_runner

    new = _sglang_version() >= Version("0.5.17")  # runtime_context.publish
    flags = scenario.new_flags if _sglang_version() >= Version("0.5.22") else scenario.old_flags
    server_args = prepare_server_args(server_argv(model_dir, (*flags, *extra), device, capture))
    scope = contextlib.ExitStack()
    _publish(server_args, scenario, new, scope)
    runner = build_model_runner(server_args, pool, device, attn_tp_size=scenario.attn_tp_size)
    return Setup(server_args, runner, _capture_bs(runner), scope)


def server_argv(model_dir: Path, flags: tuple[str, ...], device: str,
                capture: tuple[str, ...] | None = CAPTURE_LIST) -> list[str]:
    """The command line :func:`configure` hands sglang's parser: the model, sglang's ``aiter``
    backend (each case builds its own class on it), ``capture`` and ``device``, then ``flags``."""
    graph_sizes: tuple[str, ...] = ()
    if capture is not None:
        option = ("--cuda-graph-bs-decode" if _sglang_version() >= Version("0.5.15")
                  else "--cuda-graph-bs")
        graph_sizes = (option, *capture)
    return ["--model-path", str(model_dir), "--attention-backend", "aiter", *graph_sizes,
            "--skip-server-warmup", "--device", device, *flags]


def _publish(server_args: Any, scenario: Scenario, new: bool, scope: contextlib.ExitStack) -> None:
    """Publish ``server_args`` and the parallel sizes one rank of ``scenario`` would see."""
    try:
        from sglang.srt import runtime_context
    except ImportError:  # 0.5.11-0.5.13: module globals of dp_attention, no runtime context
        _publish_legacy(server_args, scenario, scope)
        return
    if new:
        runtime_context.publish(server_args, role="scheduler")
    else:
        from sglang.srt.server_args import set_global_server_args_for_scheduler

        set_global_server_args_for_scheduler(server_args)
    # No distributed groups exist here: say what a rank of this configuration would see.
    scope.enter_context(
        runtime_context.get_parallel().override(
            attn_tp_size=scenario.attn_tp_size,
            attn_tp_rank=0,
            attn_cp_size=1,
            attn_dp_size=scenario.dp,
        )
    )


def _publish_legacy(server_args: Any, scenario: Scenario, scope: contextlib.ExitStack) -> None:
    from unittest import mock

    from sglang.srt.layers import dp_attention
    from sglang.srt.server_args import set_global_server_args_for_scheduler

    set_global_server_args_for_scheduler(server_args)
    sizes = {
        "get_attn_tensor_model_parallel_world_size": scenario.attn_tp_size,
        "get_attn_context_model_parallel_world_size": 1,
    }
    for name, size in sizes.items():
        scope.enter_context(mock.patch.object(dp_attention, name, lambda size=size: size))


def graphs_off() -> tuple[str, ...]:
    """The flags that turn decode CUDA graphs off on the installed release."""
    from sglang_aiter_plugin._sglang import installed_sglang_version

    release = installed_sglang_version()
    if release is not None and Version(release.base_version) >= Version("0.5.23"):
        return ("--cuda-graph-backend-decode", "disabled")
    return ("--disable-cuda-graph",)


def _capture_bs(runner: Any) -> list[int]:
    try:
        from sglang.srt.model_executor.runner.base_cuda_graph_runner import (
            get_batch_sizes_to_capture,
        )
    except ImportError:  # 0.5.13 and older
        from sglang.srt.model_executor.cuda_graph_runner import get_batch_sizes_to_capture
    capture_bs, _ = get_batch_sizes_to_capture(runner)
    return list(capture_bs)
