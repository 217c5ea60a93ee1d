"""sglang's next changes to its AITER backend, applied to the installed release as their pull
requests describe them (written here from the descriptions: no upstream code), so that tests can
run the plugin on the release that merges them. Each is a context manager that changes sglang's
own classes or modules in place and puts them back on exit.

* :func:`unified_page_table_filled`: sglang#40410 and sglang#34833 (open) make the graph
  metadata copy each row's ``req_to_token`` indices into the unified decode page table at page
  size 1 too (before them only the sliding-window and page > 1 branches copy);
* :func:`workspace_helper`: sglang#36563 (open) moves the paged-decode workspace size into
  ``sglang.srt.layers.attention.aiter_workspace.aiter_attn_workspace_bytes(*, max_num_reqs,
  num_head, head_dim, context_len)``, which the backend allocates with and the KV budget charges;
* :func:`static_metadata_buffers` and :func:`init_backends`: sglang#28763 renames
  ``init_cuda_graph_state`` to ``init_static_metadata_buffers`` and sglang#28764 (both open)
  calls it at eager init, sized for the eager runner's union maximum, no longer from the graph
  runner;
* :func:`plugins_loaded_in_post_init`: sglang#38464 (open) calls ``load_plugins()`` at the start
  of ``ServerArgs.__post_init__`` (and in every spawned process);
* :func:`registration_off_for_dsa_dp`: sglang#36088 (open) turns registration during capture off
  in its communicator dispatch, for aiter's and sglang's own custom all-reduce, under
  torch_memory_saver and when DP attention is on with the ``dsa`` decode attention backend;
* :func:`no_dual_graphs_under_dp_attention`: sglang#36079 (open) stops capturing the DSA
  dense/sparse graph pair on HIP when DP attention is on;
* :func:`metadata_reads_more_of_the_batch`: no pull request, a release as any may come: its graph
  metadata reads a field of the batch the plugin's page-table probe does not hand it.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import sys
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch

__all__ = ["WORKSPACE_MODULE", "init_backends", "metadata_reads_more_of_the_batch",
           "no_dual_graphs_under_dp_attention", "plugins_loaded_in_post_init",
           "registration_off_for_dsa_dp", "static_metadata_buffers", "unified_page_table_filled",
           "workspace_helper"]

WORKSPACE_MODULE = "sglang.srt.layers.attention.aiter_workspace"


@contextlib.contextmanager
def _replaced(owner: Any, changes: dict[str, Any]) -> Iterator[None]:
    """``owner``'s own attributes set to ``changes`` (``None``: removed), restored on exit."""
    missing = object()
    saved = {name: vars(owner).get(name, missing) for name in changes}
    for name, value in changes.items():
        if value is None:
            delattr(owner, name)
        else:
            setattr(owner, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is missing:
                if name in vars(owner):
                    delattr(owner, name)
            else:
                setattr(owner, name, value)


# ---------------------------------------------------------------- sglang#40410, sglang#34833


@contextlib.contextmanager
def unified_page_table_filled() -> Iterator[list[int]]:
    """Upstream's graph metadata fills the unified page table at page size 1 (0.5.13+: in
    ``_apply_cuda_graph_metadata``; 0.5.11-0.5.12, which have no such helper: after the capture
    and replay methods). Yields the batch sizes it filled the table for, call by call."""
    from sglang.srt.layers.attention.aiter_backend import AiterAttnBackend

    names = ["_apply_cuda_graph_metadata"]
    if not hasattr(AiterAttnBackend, names[0]):
        names = ["init_forward_metadata_capture_cuda_graph",
                 "init_forward_metadata_replay_cuda_graph"]
    filled: list[int] = []

    def filling(original: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(original)

        def method(self: Any, *args: Any, **kw: Any) -> Any:
            result = original(self, *args, **kw)
            _fill_page_one(self, signature.bind(self, *args, **kw).arguments, filled)
            return result

        return method

    with _replaced(AiterAttnBackend, {n: filling(vars(AiterAttnBackend)[n]) for n in names}):
        yield filled


def _fill_page_one(backend: Any, call: dict[str, Any], filled: list[int]) -> None:
    """The branch the pull requests add: decode without a draft, unified (a page table), page
    size 1, no sliding window, not MLA."""
    uses_table = getattr(backend, "decode_uses_page_table", backend.use_triton_unified_attention)
    if (not call["forward_mode"].is_decode_or_idle() or call.get("spec_info") is not None
            or not uses_table or backend.page_size != 1 or backend.use_sliding_window_kv_pool
            or backend.use_mla):
        return
    bs = int(call["bs"])
    lens = call.get("seq_lens_cpu")
    width = int((call["seq_lens"] if lens is None else lens)[:bs].max())
    table = getattr(backend, "cuda_graph_page_table", None)
    if table is None:  # 0.5.11-0.5.12: a view of the indices, one token per entry at page 1
        table = backend.cuda_graph_kv_indices.view(-1, int(backend.max_context_len))
    table[:bs, :width].copy_(backend.req_to_token[call["req_pool_indices"][:bs], :width])
    filled.append(bs)


# ---------------------------------------------------------------- a release to come


@contextlib.contextmanager
def metadata_reads_more_of_the_batch() -> Iterator[str]:
    """Upstream's graph metadata reads ``num_token_non_padded`` of the batch first (a field of
    sglang's ``ForwardBatch``): where the release has ``init_forward_metadata_out_graph``, as an
    attribute of ``forward_batch``; before it (0.5.11-0.5.12, the batch passed as arguments), as
    one more required argument of ``init_forward_metadata_capture_cuda_graph``. Yields the name of
    the method changed."""
    from sglang.srt.layers.attention.aiter_backend import AiterAttnBackend

    name = "init_forward_metadata_out_graph"
    if hasattr(AiterAttnBackend, name):
        out_graph = getattr(AiterAttnBackend, name)

        @functools.wraps(out_graph)
        def reading(self: Any, forward_batch: Any, *args: Any, **kw: Any) -> Any:
            forward_batch.num_token_non_padded  # noqa: B018  (the read a release adds)
            return out_graph(self, forward_batch, *args, **kw)

        method: Callable[..., Any] = reading
    else:
        name = "init_forward_metadata_capture_cuda_graph"
        capture = getattr(AiterAttnBackend, name)

        def one_more(self: Any, bs: int, num_tokens: int, req_pool_indices: Any, seq_lens: Any,
                   encoder_lens: Any, forward_mode: Any, spec_info: Any,
                   num_token_non_padded: Any) -> Any:
            return capture(self, bs, num_tokens, req_pool_indices, seq_lens, encoder_lens,
                           forward_mode, spec_info)

        method = one_more

    with _replaced(AiterAttnBackend, {name: method}):
        yield name


# ---------------------------------------------------------------- sglang#36563


@contextlib.contextmanager
def workspace_helper(partition_tokens: int = 256) -> Iterator[list[int]]:
    """sglang's ``aiter_attn_workspace_bytes`` (fp32 partial outputs and two fp32 reduction
    planes per ``partition_tokens``-token partition: the pull request's formula at 256, a later
    revision of it otherwise), and upstream's constructor allocating ``workspace_buffer`` with it
    for the request pool. Yields ``max_num_reqs`` of every call."""
    from sglang.srt.layers import attention
    from sglang.srt.layers.attention.aiter_backend import AiterAttnBackend

    calls: list[int] = []

    def aiter_attn_workspace_bytes(*, max_num_reqs: int, num_head: int, head_dim: int,
                                   context_len: int) -> int:
        calls.append(max_num_reqs)
        planes = max_num_reqs * num_head * -(-context_len // partition_tokens)
        return planes * head_dim * 4 + 2 * planes * 4

    module = types.ModuleType(WORKSPACE_MODULE)
    module.aiter_attn_workspace_bytes = aiter_attn_workspace_bytes  # type: ignore[attr-defined]
    original = vars(AiterAttnBackend)["__init__"]

    def __init__(self: Any, model_runner: Any, *args: Any, **kw: Any) -> None:
        original(self, model_runner, *args, **kw)
        if getattr(self, "workspace_buffer", None) is not None:
            size = aiter_attn_workspace_bytes(
                max_num_reqs=int(model_runner.req_to_token_pool.size), num_head=self.num_head,
                head_dim=self.head_dim, context_len=self.max_context_len)
            self.workspace_buffer = torch.empty(size, dtype=torch.uint8, device=self.device)

    sys.modules[WORKSPACE_MODULE] = module
    try:
        with _replaced(attention, {"aiter_workspace": module}), \
                _replaced(AiterAttnBackend, {"__init__": __init__}):
            yield calls
    finally:
        sys.modules.pop(WORKSPACE_MODULE, None)


# ---------------------------------------------------------------- sglang#28763, sglang#28764


@contextlib.contextmanager
def static_metadata_buffers() -> Iterator[list[str]]:
    """``init_cuda_graph_state`` renamed ``init_static_metadata_buffers`` on the attention
    backend base class and both aiter classes (the draft wrapper's body still sets its children
    up by their old name; the plugin's children answer to both). Yields the classes renamed."""
    from sglang.srt.layers.attention.aiter_backend import (
        AiterAttnBackend,
        AiterMultiStepDraftBackend,
    )
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend

    with contextlib.ExitStack() as stack:
        renamed = []
        for cls in (AttentionBackend, AiterAttnBackend, AiterMultiStepDraftBackend):
            method = vars(cls).get("init_cuda_graph_state")
            if method is not None:
                stack.enter_context(_replaced(cls, {"init_static_metadata_buffers": method,
                                                    "init_cuda_graph_state": None}))
                renamed.append(cls.__name__)
        yield renamed


def init_backends(backend: Any, setup: Any) -> int:
    """sglang#28764's ``ModelRunner.init_backends``: the backend's static buffers set up right
    after construction, for the eager runner's union maximum (its own maximum where the release
    has an eager runner, never below the largest graph); returns that maximum."""
    from testkit.batch_paths import eager_runner_max, graph_max

    eager = eager_runner_max(setup) or int(setup.runner.req_to_token_pool.size)
    top = max(graph_max(setup), eager)
    backend.init_static_metadata_buffers(top, top)
    return top


# ---------------------------------------------------------------- sglang#38464


@contextlib.contextmanager
def plugins_loaded_in_post_init() -> Iterator[None]:
    """``ServerArgs.__post_init__`` calls sglang's ``load_plugins()`` before its own body. The
    function sglang holds gets the new body in place (0.5.23's ``ServerArgs`` is a msgspec struct,
    which calls the ``__post_init__`` it found when the class was made, whatever the class
    attribute says later); the body finds the loader and a copy of the original in the module's
    namespace, for as long as the change lasts."""
    from sglang.srt import server_args
    from sglang.srt.plugins import load_plugins

    post_init = vars(server_args.ServerArgs)["__post_init__"]
    code = post_init.__code__
    original = types.FunctionType(code, post_init.__globals__, post_init.__name__,
                                  post_init.__defaults__, post_init.__closure__)
    with _replaced(server_args, {"_upstream_next_load_plugins": load_plugins,
                                 "_upstream_next_post_init": original}):
        post_init.__code__ = _loading_plugins_first.__code__
        try:
            yield
        finally:
            post_init.__code__ = code


def _loading_plugins_first(self: Any) -> Any:
    """The body :func:`plugins_loaded_in_post_init` gives ``ServerArgs.__post_init__``."""
    _upstream_next_load_plugins()  # type: ignore[name-defined]  # noqa: F821
    return _upstream_next_post_init(self)  # type: ignore[name-defined]  # noqa: F821


# ---------------------------------------------------------------- sglang#36088


def _dp_attention_on() -> bool:
    from sglang.srt.layers.dp_attention import is_dp_attention_enabled

    return bool(is_dp_attention_enabled())


@contextlib.contextmanager
def registration_off_for_dsa_dp() -> Iterator[Callable[[], bool]]:
    """sglang#36088's policy in ``custom_all_reduce.py``: registration during capture is off
    under ``SGLANG_MEMORY_SAVER_CUDA_GRAPH`` and when DP attention is on and the decode attention
    backend (``runtime_context.attention_backends()[1]``) is ``dsa``; ``dispatch_custom_allreduce``
    passes it to aiter's ``CustomAllreduce`` as ``enable_register_for_capturing``, and sglang's
    own ``CustomAllreduce`` takes the same keyword and captures registered only where it allows.
    Yields the policy (what the communicators of a process built now get)."""
    from sglang.srt import runtime_context
    from sglang.srt.distributed.device_communicators import custom_all_reduce as car

    def capture_registration_enabled() -> bool:
        if car.envs.SGLANG_MEMORY_SAVER_CUDA_GRAPH.get():
            return False
        return not (_dp_attention_on() and runtime_context.attention_backends()[1] == "dsa")

    dispatch = vars(car)["dispatch_custom_allreduce"]
    own = car.CustomAllreduce

    def dispatch_custom_allreduce(group: Any, device: Any) -> Any:
        chosen = dispatch(group, device)
        flag = capture_registration_enabled()
        if isinstance(chosen, functools.partial):
            return functools.partial(chosen.func, *chosen.args,
                                     **{**chosen.keywords, "enable_register_for_capturing": flag})
        if chosen is own:
            return functools.partial(own, enable_register_for_capturing=flag)
        return chosen

    init, capture_all_reduce = vars(own)["__init__"], vars(own)["custom_all_reduce"]

    def __init__(self: Any, *args: Any, enable_register_for_capturing: bool = True,
                 **kwargs: Any) -> None:
        self.enable_register_for_capturing = enable_register_for_capturing
        init(self, *args, **kwargs)

    def custom_all_reduce(self: Any, input: Any) -> Any:
        if getattr(self, "enable_register_for_capturing", True):
            return capture_all_reduce(self, input)
        tms = self.tms_cudagraph  # sglang's own capture path: registered=not tms_cudagraph
        self.tms_cudagraph = True
        try:
            return capture_all_reduce(self, input)
        finally:
            self.tms_cudagraph = tms

    with _replaced(car, {"dispatch_custom_allreduce": dispatch_custom_allreduce}), \
            _replaced(own, {"__init__": __init__, "custom_all_reduce": custom_all_reduce}):
        yield capture_registration_enabled


# ---------------------------------------------------------------- sglang#36079


@contextlib.contextmanager
def no_dual_graphs_under_dp_attention() -> Iterator[None]:
    """sglang#36079: with DP attention on, the decode graph runner captures one graph per batch
    size for DSA models on HIP. 0.5.20+: ``create_attention_graph_variants`` gives ``None`` then
    (in its module and where the decode graph runner imported it); 0.5.18-0.5.19:
    ``DecodeCudaGraphRunner.__init__`` leaves ``dsa_dual_graph`` off."""
    from sglang.srt.model_executor.runner import decode_cuda_graph_runner as runner

    create = getattr(runner, "create_attention_graph_variants", None)
    if create is not None:
        from sglang.srt.layers.attention import graph_variants

        def create_attention_graph_variants(hf_config: Any) -> Any:
            return None if _dp_attention_on() else create(hf_config)

        with _replaced(graph_variants, {"create_attention_graph_variants":
                                        create_attention_graph_variants}), \
                _replaced(runner, {"create_attention_graph_variants":
                                   create_attention_graph_variants}):
            yield
        return
    cls = runner.DecodeCudaGraphRunner
    init = vars(cls)["__init__"]

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if _dp_attention_on():
            self.dsa_dual_graph = False

    with _replaced(cls, {"__init__": __init__}):
        yield
