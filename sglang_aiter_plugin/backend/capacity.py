"""The largest batch sglang can hand an attention backend, on any path, known at construction
(docs/buffer-pool.md): from sglang's own functions where the release has them, else from the same
rule on sglang's own pieces (``ceil_align``, ``require_mlp_sync``, ...); a release with neither is
refused by name (:class:`BatchCapacityError`) rather than sized by guesswork.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from typing import Any, NamedTuple

from sglang_aiter_plugin._errors import AiterExtError

__all__ = ["BatchCapacity", "BatchCapacityError", "capacity_of", "requires_mlp_sync"]

_COMMON = "sglang.srt.utils.common"
_CP_PADDING = ("sglang.srt.layers.cp.padding", "sglang.srt.layers.utils.cp_utils")


class BatchCapacityError(AiterExtError, RuntimeError):
    """The installed sglang exposes neither the batch-size rule nor the pieces to apply it."""


class BatchCapacity(NamedTuple):
    """Batch rows per path for one backend (:attr:`rows`: what its pool must hold): ``pool`` (P),
    ``requests`` (one forward before padding: more than P for frozen-KV MTP drafts), ``eager``
    (after the MLP-sync padding), ``graph`` (the largest CUDA-graph batch); ``source``: which of
    sglang's functions (or rules) gave ``eager`` and ``graph``."""

    pool: int
    requests: int
    eager: int
    graph: int
    source: str

    @property
    def rows(self) -> int:
        return max(self.pool, self.requests, self.eager, self.graph)


def capacity_of(model_runner: Any) -> BatchCapacity:
    """The largest batch on each path for a backend built on ``model_runner``, and its source."""
    server_args = model_runner.server_args
    pool = int(model_runner.req_to_token_pool.size)
    requests = max(pool, _int_or_zero(getattr(model_runner, "max_running_requests", None)))
    requests *= _draft_expansion(model_runner, server_args)
    common = importlib.import_module(_COMMON)
    eager_fn = getattr(common, "get_eager_max_batch_size", None)
    graph_fn = getattr(common, "get_cuda_graph_max_batch_size", None)
    sources = []
    if eager_fn is not None:
        eager = int(_call(eager_fn, server_args, requests))
        sources.append("get_eager_max_batch_size")
    else:
        eager = _eager_by_rule(common, server_args, requests)
        sources.append("the MLP-sync rule")
    if graph_fn is not None:
        graph = int(_call(graph_fn, server_args, pool))
        sources.append("get_cuda_graph_max_batch_size")
    else:
        graph = _ceil_align(common, pool, _graph_alignment(common, server_args))
        sources.append("the graph-size rule")
    return BatchCapacity(pool, requests, eager, graph, " + ".join(sources))


def _int_or_zero(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _draft_expansion(model_runner: Any, server_args: Any) -> int:
    """A frozen-KV MTP draft worker expands its batch by top-k before the eager forward."""
    algorithm = getattr(model_runner, "spec_algorithm", None)
    frozen = getattr(algorithm, "is_frozen_kv_mtp", None)
    if not getattr(model_runner, "is_draft_worker", False) or frozen is None or not frozen():
        return 1
    topk = None
    try:  # 0.5.17+: the published speculative configuration
        from sglang.srt.runtime_context import get_spec

        topk = get_spec().speculative_eagle_topk
    except (ImportError, AttributeError, RuntimeError):
        pass
    if not _int_or_zero(topk):
        topk = getattr(server_args, "speculative_eagle_topk", None)
    return max(1, _int_or_zero(topk))


def _call(fn: Callable[..., Any], server_args: Any, *args: Any) -> Any:
    """Call one of sglang's rules: ``fn(server_args, ...)`` up to 0.5.18, ``fn(...)`` after."""
    params = list(inspect.signature(fn).parameters)
    if params and params[0] == "server_args":
        return fn(server_args, *args)
    return fn(*args)


def _need(common: Any, name: str) -> Callable[..., Any]:
    fn = getattr(common, name, None)
    if fn is None:
        raise BatchCapacityError(
            f"this sglang has no {_COMMON}.{name}, so aiter-ext cannot tell the largest batch it "
            "will be sent (the per-batch buffers would be sized by guesswork). Use "
            "--attention-backend aiter, or a sglang-aiter-plugin release that supports this sglang."
        )
    return fn  # type: ignore[no-any-return]


def _ceil_align(common: Any, x: int, y: int) -> int:
    return int(_need(common, "ceil_align")(x, y))


def requires_mlp_sync(server_args: Any) -> bool:
    """sglang's ``require_mlp_sync``: whether eager batches go through the MLP-sync padding."""
    common = importlib.import_module(_COMMON)
    return bool(_call(_need(common, "require_mlp_sync"), server_args))


def _eager_by_rule(common: Any, server_args: Any, requests: int) -> int:
    """``prepare_mlp_sync_batch``'s padding of a full rank, as the release applies it."""
    if not requires_mlp_sync(server_args):
        return requests
    rows = _ceil_align(common, requests, _parallel_size("attn_tp_size"))
    return _ceil_align(common, rows, _cp_padding_align())


def _graph_alignment(common: Any, server_args: Any) -> int:
    """``get_batch_sizes_to_capture``'s ``mul_base`` (0.5.11-0.5.16 compute it inline)."""
    alignment = 2 if getattr(server_args, "enable_two_batch_overlap", False) else 1
    if _call(_need(common, "require_gathered_buffer"), server_args):
        alignment *= _parallel_size("attn_tp_size")
    cp = _parallel_size("attn_cp_size")
    if alignment % cp:
        alignment *= cp
    return alignment


def _parallel_size(name: str) -> int:
    """The attention TP/CP size this rank runs with (runtime context from 0.5.14)."""
    try:
        from sglang.srt.runtime_context import get_parallel
    except ImportError:  # 0.5.11-0.5.13: dp_attention's module state
        from sglang.srt.layers import dp_attention

        getter = {"attn_tp_size": "get_attention_tp_size", "attn_cp_size": "get_attention_cp_size"}
        fn = getattr(dp_attention, getter[name], None)
        if fn is None:
            if name == "attn_cp_size":
                return 1
            raise BatchCapacityError(
                f"this sglang exposes no attention-TP size (dp_attention.{getter[name]}); "
                "aiter-ext cannot tell the largest batch it will be sent. Use "
                "--attention-backend aiter."
            ) from None
        return int(fn())
    return int(getattr(get_parallel(), name))


def _cp_padding_align() -> int:
    for module in _CP_PADDING:
        try:
            fn = importlib.import_module(module).get_cp_padding_align_size
        except (ImportError, AttributeError):
            continue
        return int(fn())
    return 1  # 0.5.11-0.5.12: no context-parallel padding
