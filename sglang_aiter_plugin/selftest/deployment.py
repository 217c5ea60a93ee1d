"""The operator's deployment: ``sglang-aiter-plugin selftest [sglang server arguments]``.

The arguments go through sglang's own parser (``ServerArgs.add_cli_args``, then
``prepare_server_args`` as the self-test configures every case, :mod:`.sglang_setup`); the model
is its ``config.json`` in a local folder (no weights are read, nothing is downloaded).
:func:`plan` builds the cases that configuration takes on one rank of it: its decode path
(ragged, unified under ``SGLANG_USE_AITER_UNIFIED_ATTN``, MLA), its page size and per-rank heads
(the heads over attention TP), its request pool (``--max-running-requests`` over attention DP),
each graph it captures (decode; target verify and draft extend with speculative decoding) and
its eager batch (padded by MLP sync where the configuration has it). A case the self-test cannot
run yet is listed as skipped, with why.

Importing this module imports neither torch nor sglang; :func:`plan` imports sglang.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NoReturn

from sglang_aiter_plugin._errors import AiterExtError
from sglang_aiter_plugin.selftest.cases import Case, Deployment
from sglang_aiter_plugin.selftest.sglang_setup import POOL

__all__ = ["DeploymentArgsError", "Plan", "plan"]

_OWN_BACKEND = ("--attention-backend", "--decode-attention-backend",
                "--prefill-attention-backend")
"""Options the self-test sets itself: every case builds sglang's ``aiter`` backend class and the
plugin's ``aiter-ext`` class on the configuration."""


class DeploymentArgsError(AiterExtError, ValueError):
    """The sglang server arguments given to ``selftest`` cannot configure a case (exit status
    2): sglang's parser refused them, or the model is not a local folder with config.json."""


@dataclass(frozen=True)
class Plan:
    cases: tuple[Case, ...]
    notes: tuple[str, ...]
    """What the self-test does with the arguments beyond the cases (set aside, assumed)."""


class _Parser(argparse.ArgumentParser):
    """sglang's parser, whose refusal is an exception here instead of its usage and an exit."""

    def error(self, message: str) -> NoReturn:
        raise DeploymentArgsError(f"sglang's parser: {message}")


def plan(args: Sequence[str], device: str) -> Plan:
    """The cases the sglang server arguments ``args`` take on one rank, on ``device``; raises
    :class:`DeploymentArgsError` where sglang refuses them or the model is not a local folder
    with config.json."""
    from sglang.srt.configs.model_config import AttentionArch, ModelConfig
    from sglang.srt.server_args import ServerArgs, prepare_server_args

    from sglang_aiter_plugin._errors import shorten
    from sglang_aiter_plugin.selftest.sglang_setup import server_argv

    given, notes = _without_own_backend(list(args))
    parser = _Parser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    raw = parser.parse_args(given)
    model = _model_folder(str(raw.model_path))
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            server_args = prepare_server_args(server_argv(model, tuple(given), device, None))
        config = ModelConfig.from_server_args(server_args)
    except (Exception, SystemExit) as exc:
        text = shorten(f"{type(exc).__name__}: {exc}", 300, quoted=False)
        raise DeploymentArgsError(f"sglang refused the configuration: {text}") from exc
    attn_dp = _attn_dp_size(server_args)
    attn_tp = max(1, int(server_args.tp_size) // attn_dp)
    requests = getattr(server_args, "max_running_requests", None)
    if requests:
        pool = max(1, int(requests) // attn_dp)
        notes.append(f"request pool {pool} a rank: --max-running-requests {requests} over "
                     f"{attn_dp} attention-DP rank(s)")
    else:
        pool = POOL
        notes.append(f"request pool {POOL} a rank: the self-test's own (sglang sizes yours from "
                     "the GPU's memory; give --max-running-requests for yours)")
    algorithm = getattr(server_args, "speculative_algorithm", None)
    draft = None
    if algorithm:
        draft = (int(server_args.speculative_eagle_topk or 1),
                 int(server_args.speculative_num_steps or 1))
    deployment = Deployment(tuple(given), str(model), pool, attn_tp, attn_dp, draft)
    mla = config.attention_arch == AttentionArch.MLA
    path = "mla" if mla else "unified" if _unified() else "ragged"
    page = int(server_args.page_size or 1)
    about = (f"{_heads(config, attn_tp, mla)}, page size {page}, KV cache "
             f"{server_args.kv_cache_dtype}, pool {pool}")
    persistent = mla and str(server_args.kv_cache_dtype).startswith("fp8")
    if persistent:  # sglang takes it for an fp8 KV cache
        about += ", aiter's persistent MLA kernel"
    graphs = not _graphs_off(server_args)
    cases = _cases(deployment, path, page, about, graphs, server_args)
    if persistent and device == "cpu":
        cases = tuple(replace(c, gpu_only=_PERSISTENT_ON_CUDA) for c in cases)
    window = _sliding_window(config)
    if window:
        cases = tuple(replace(c, why=f"{c.why}; {window}", skip=c.skip or _SWA_SKIP)
                      for c in cases)
    return Plan(cases, tuple(notes))


_PERSISTENT_ON_CUDA = ("sglang allocates the persistent MLA kernel's work schedule on CUDA, so "
                       "this case runs on a GPU only")


_SWA_SKIP = ("the self-test does not build sliding-window attention yet: its model runner holds "
             "one full-attention KV pool (no SWA pool) and its layer no window, so the batch "
             "would not be the one this model runs")


def _sliding_window(config: Any) -> str:
    """What sliding-window attention sglang's ``ModelConfig`` gives the model ("" when none):
    its window and, for a hybrid model, that sglang keeps a separate sliding-window KV pool."""
    size = getattr(config, "sliding_window_size", None)
    hybrid = bool(getattr(config, "is_hybrid_swa", False))
    if not size and not hybrid:
        return ""
    what = f"sliding-window attention (window {size})" if size else "sliding-window attention"
    if hybrid:
        layers = getattr(config, "swa_attention_layer_ids", None)
        total = getattr(config, "num_hidden_layers", None)
        share = f" on {len(layers)} of {total} layers" if layers and total else ""
        what += f"{share}, with sglang's hybrid SWA KV pool"
    return what


def _cases(d: Deployment, path: str, page: int, about: str, graphs: bool,
           server_args: Any) -> tuple[Case, ...]:
    base = f"{path}-page{page}"
    decode = {"ragged": "ragged paged decode", "unified": "unified page-table decode "
              "(SGLANG_USE_AITER_UNIFIED_ATTN)", "mla": "MLA decode"}[path]
    sync = (f", padded by MLP sync beside {d.attn_dp - 1} other attention-DP rank(s) of "
            f"{d.pool}" if d.attn_dp > 1 else "")
    eager_when = ("decode CUDA graphs are off" if not graphs
                  else "batches above the largest graph, and graphs off, run eagerly")
    if d.draft is None:
        cases = []
        if graphs:
            cases.append(Case(f"{base}-graphs", path, page, "graphs", d, why=(
                f"{decode}, {about}: decode CUDA graphs at every size sglang captures for this "
                "configuration, replayed with real requests")))
        cases.append(Case(f"{base}-eager", path, page, "eager", d, why=(
            f"{decode}, {about}: one eager decode batch of {d.pool} requests{sync} "
            f"({eager_when})")))
        return tuple(cases)
    topk, steps = d.draft
    drafts = int(server_args.speculative_num_draft_tokens or steps + 1)
    spec = f"{server_args.speculative_algorithm}, {steps} steps, top-{topk}"
    verify_skip = ("the target-verify batch covers top-1 (a linear draft chain) only" if topk != 1
                   else "")
    verify = (f"{decode}, {about}: the target's target-verify batches ({spec}, {drafts} draft "
              "tokens a request, each seeing its request's KV and the drafts up to itself)")
    cases = []
    if graphs:
        cases.append(Case(f"{base}-verify-graphs", path, page, "graphs", d, mode="verify", why=(
            f"{verify}: CUDA graphs at every size sglang captures for this configuration, "
            "replayed with real requests"), skip=verify_skip))
    cases.append(Case(f"draft-page{page}-metadata", "draft", page, "metadata", d, why=(
        f"EAGLE draft wrapper ({spec}), page size {page}, pool {d.pool}: each step's kv_indptr "
        "after the draft graphs' metadata, at every size sglang captures"),
        skip="" if topk == 1 else "the draft check covers top-1 only"))
    if graphs:
        cases.append(Case(f"{base}-draft-extend-graphs", path, page, "graphs", d,
                          mode="draft-extend", why=(
            f"{decode}, {about}: the draft's draft-extend CUDA graphs ({spec}, sglang's "
            f"DRAFT_EXTEND_V2: {drafts} tokens a request appended to its KV, each seeing the "
            "request's KV up to itself), at every size sglang captures, replayed with real "
            "requests"), skip=verify_skip))
    cases.append(Case(f"{base}-verify-eager", path, page, "eager", d, mode="verify", why=(
        f"{verify}: one eager batch of {d.pool} requests{sync}"), skip=verify_skip))
    return tuple(cases)


def _without_own_backend(args: list[str]) -> tuple[list[str], list[str]]:
    """``args`` without the backend options the self-test sets itself, and a note for each."""
    kept: list[str] = []
    notes: list[str] = []
    i = 0
    while i < len(args):
        name, _, value = args[i].partition("=")
        if name in _OWN_BACKEND:
            if not value and i + 1 < len(args):
                value = args[i + 1]
                i += 1
            notes.append(f"{name} {value} set aside: every case builds both sglang's aiter "
                         "backend and aiter-ext")
        else:
            kept.append(args[i])
        i += 1
    return kept, notes


def _model_folder(model: str) -> Path:
    """The local folder holding the model's config.json, or why not."""
    folder = Path(model).expanduser()
    if (folder / "config.json").is_file():
        return folder
    why = ("the folder holds no config.json" if folder.is_dir() else "no such folder here")
    hint = ""
    if not folder.exists() and re.fullmatch(r"[\w.-]+/[\w.-]+", model):
        hint = (f"; it reads like a Hugging Face id, but only a local folder with config.json "
                f"works (nothing is downloaded): fetch the config, e.g. huggingface-cli download "
                f"{model} config.json --local-dir DIR, and give --model-path DIR")
    raise DeploymentArgsError(
        f"--model-path {model}: the self-test reads only the model's config.json from a local "
        f"folder (no weights); {why}{hint}")


def _attn_dp_size(server_args: Any) -> int:
    """Attention-DP size: ``--attn-dp-size`` (0.5.22+), else ``--dp-size`` under
    ``--enable-dp-attention``, else 1."""
    size = int(getattr(server_args, "attn_dp_size", 0) or 0)
    if size > 1:
        return size
    if getattr(server_args, "enable_dp_attention", False):
        return max(1, int(server_args.dp_size))
    return 1


def _graphs_off(server_args: Any) -> bool:
    """Whether the configuration turns decode CUDA graphs off (any release's flags)."""
    backend = str(getattr(server_args, "cuda_graph_backend_decode", "") or "").lower()
    return bool(getattr(server_args, "disable_cuda_graph", False)
                or getattr(server_args, "disable_decode_cuda_graph", False)
                or backend.endswith("disabled"))


def _unified() -> bool:
    """sglang's reading of ``SGLANG_USE_AITER_UNIFIED_ATTN`` (``get_bool_env_var``)."""
    return os.environ.get("SGLANG_USE_AITER_UNIFIED_ATTN", "false").lower() in ("true", "1")


def _heads(config: Any, attn_tp: int, mla: bool) -> str:
    heads = int(config.num_attention_heads) // attn_tp
    if mla:
        return (f"{heads} query heads a rank over one latent KV head "
                f"({config.kv_lora_rank} + {config.qk_rope_head_dim})")
    return (f"{heads} query / {config.get_num_kv_heads(attn_tp)} KV heads a rank, head size "
            f"{config.head_dim}")
