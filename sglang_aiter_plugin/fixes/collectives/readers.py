"""The canary over the rest of sglang: every function outside ``GroupCoordinator`` that reaches
aiter's communicator, read from the installed sglang's source (no module imported), and whether
the plugin knows it.

A function reaches the communicator when it reads a group's ``ca_comm`` or the registration flag
(``enable_register_for_capturing``), or, in a module that imports aiter's communicator class,
its internals (``_ptr``, ``_pool``, ``_IS_CAPTURING``). Such code can capture a registered
collective that no collective fix sees (DeepSeek-V4.1's fused all-reduce + hc_post did, before
the whole-capture scope). Left out: ``GroupCoordinator`` itself (its calls are
:mod:`.calls`'s canary), sglang's communicator classes (``srt/distributed/device_communicators``)
and the tests a wheel ships. Each function found is known (:data:`KNOWN`, with why) or reported
by ``doctor`` with its file and function.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import NamedTuple

__all__ = ["AITER_COMMUNICATOR_MODULE", "KNOWN", "Reader", "communicator_readers", "known_as"]

AITER_COMMUNICATOR_MODULE = "aiter.dist.device_communicators.custom_all_reduce"
_ALWAYS = ("ca_comm", "enable_register_for_capturing")
_INTERNALS = ("_ptr", "_pool", "_IS_CAPTURING")  # only where aiter's class is imported
_LEFT_OUT = (("srt", "distributed", "parallel_state.py"),  # GroupCoordinator: calls.py
             ("srt", "distributed", "device_communicators"))

_MHC = "srt/models/deepseek_common/amd/deepseek_v4_fused_mhc.py"
_FLAG_SCOPE = ("reads the registration flag to choose the fused all-reduce + hc_post: "
               "capture-all-reduce turns the flag off for the whole capture under a condition")
_CHOSEN_BY_FLAG = ("runs DeepSeek-V4.1's fused all-reduce + hc_post on the group's communicator, "
                   "only where _make_mhc_fusion chose it by the flag")
_V2_ONLY = "takes only sglang's CustomAllReduceV2 (CUDA), never aiter's communicator"
_COMPILE = "saves and puts back the TP group's ca_comm around torch.compile; runs no collective"
_VIT = ("enters the communicator's capture() for a ViT graph; its collectives go through "
        "GroupCoordinator's methods, which the collective fixes wrap")
KNOWN: dict[tuple[str, str], str] = {
    (_MHC, "_make_mhc_fusion"): _FLAG_SCOPE,
    (_MHC, "attention_mhc_fusion"): _CHOSEN_BY_FLAG,
    (_MHC, "moe_mhc_fusion"): _CHOSEN_BY_FLAG,
    (_MHC, "apply_attention_mhc"): _CHOSEN_BY_FLAG,
    (_MHC, "apply_moe_mhc"): _CHOSEN_BY_FLAG,
    ("kernels/ops/communication/all_reduce_mhc_hip.py", "all_reduce_mhc_post"): _CHOSEN_BY_FLAG,
    ("srt/compilation/torch_compile_decoration.py", "patch_model"): _COMPILE,
    ("srt/model_executor/cpu_graph_runner.py", "patch_model"): _COMPILE,
    ("srt/model_executor/cuda_graph_runner.py", "patch_model"): _COMPILE,
    ("srt/multimodal/vit_cuda_graph_runner.py", "ViTCudaGraphRunner._capture_context"): _VIT,
    ("srt/multimodal/vit_cuda_graph_runner.py", "ViTCudaGraphRunner._create_graph"): _VIT,
    ("srt/layers/dp_attention.py", "_decode_sum_len_fits_custom_all_reduce"):
        "asks whether a size fits the custom all-reduce; runs no collective",
    ("srt/layers/communication/k3_ar_fusion.py", "_get_state"): _V2_ONLY,
    ("srt/layers/k3_ar_fusion.py", "_get_state"): _V2_ONLY,
    ("srt/layers/k3_sp_collective.py", "_init_state"): _V2_ONLY,
    ("srt/layers/quantization/mxfp4_flashinfer_trtllm_moe.py",
     "_fused_finalize_all_reduce_comm_world_size"): _V2_ONLY,
    ("srt/layers/quantization/mxfp4_flashinfer_trtllm_moe.py", "can_fuse_all_reduce"):
        "reads the communicator registered by register_fused_all_reduce_comm, which takes only "
        "sglang's CustomAllReduceV2 (CUDA)",
    ("srt/layers/communication/k3_sp_collective.py", "_init_state"): _V2_ONLY,
    ("srt/layers/moe/qwen4_decode.py", "prepare_qwen4_decode_comm"): _V2_ONLY,
    ("srt/layers/quantization/mxfp4_flashinfer_trtllm_moe.py",
     "register_fused_all_reduce_comm"): _V2_ONLY,
    ("srt/models/beam.py", "BeamModel._prepare_all_reduce_comm"): _V2_ONLY,
    ("srt/layers/communication/muse_spark_finalize_workspace.py",
     "FinalizePushWorkspace.can_fuse"): "Blackwell (CUDA, SM 10.3) only",
    ("srt/models/muse_spark.py", "MuseSpark1xDecoderLayer.forward"):
        "Blackwell (CUDA) only: hands the communicator to gemm_ag_supported",
    ("srt/models/muse_spark.py", "MuseSpark1xMoE.__init__"): "Blackwell (CUDA, SM 10.3) only",
    ("srt/models/muse_spark.py", "MuseSpark1xMoE._forward_experts"):
        "Blackwell (CUDA) only: hands the communicator to gemm_ag_supported",
    ("srt/models/muse_spark.py", "MuseSpark1xMoE._reduce_and_unpool"):
        "Blackwell (CUDA) only: hands the communicator to gemm_ag_supported",
    ("srt/models/muse_spark.py", "MuseSpark1xModel.__init__"): "Blackwell (CUDA, SM 10.3) only",
}
"""Each function known to reach aiter's communicator (path below the ``sglang`` package,
qualified name) -> why no capture under a condition registers through it unnoticed."""


class Reader(NamedTuple):
    """A function that reaches aiter's communicator: its file (below the ``sglang`` package),
    qualified name, first line that reaches it, and what it reads."""

    path: str
    function: str
    line: int
    reads: tuple[str, ...]


def _left_out(relative: Path) -> bool:
    parts = relative.parts
    if any(part in ("test", "tests") for part in parts[:-1]) or parts[-1].startswith("test_"):
        return True
    return any(parts[:len(prefix)] == prefix for prefix in _LEFT_OUT)


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    """Each function in ``tree`` (qualified by its classes and functions), with its own body
    (nested functions apart)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield f"{prefix}{node.name}", node
            yield from _functions(node, f"{prefix}{node.name}.")


def _own_nodes(function: ast.AST) -> Iterator[ast.AST]:
    for node in ast.iter_child_nodes(function):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            yield node
            yield from _own_nodes(node)


def _readers_in(relative: str, source: str) -> list[Reader]:
    names = _ALWAYS + (_INTERNALS if AITER_COMMUNICATOR_MODULE in source else ())
    found = []
    for qualname, function in _functions(ast.parse(source)):
        reads = sorted((node.lineno, node.col_offset, node.attr) for node in _own_nodes(function)
                       if isinstance(node, ast.Attribute) and node.attr in names)
        if reads:  # in source order
            found.append(Reader(relative, qualname, reads[0][0],
                                tuple(dict.fromkeys(attr for _, _, attr in reads))))
    return found


def communicator_readers(root: Path) -> list[Reader]:
    """Every function below ``root`` (sglang's package directory) that reaches aiter's
    communicator (the module doc), by file and line."""
    found: list[Reader] = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if _left_out(relative):
            continue
        source = path.read_text(encoding="utf-8", errors="replace")
        if not any(name in source for name in (*_ALWAYS, AITER_COMMUNICATOR_MODULE)):
            continue
        found.extend(_readers_in(relative.as_posix(), source))
    return found


def known_as(reader: Reader) -> str | None:
    """Why the plugin knows ``reader`` (:data:`KNOWN`), or ``None`` where it does not."""
    return KNOWN.get((reader.path, reader.function))
