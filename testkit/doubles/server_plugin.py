"""A test-only sglang plugin that installs the server doubles in every process sglang starts.

:func:`site_dir` writes a directory holding a tiny ``sglang-e2e-doubles`` distribution (a
``dist-info`` with one ``sglang.srt.plugins`` entry point, ``e2e_doubles`` ->
:func:`install`). The tests put that directory first on the server's ``PYTHONPATH`` (and only
the server's), so sglang's own plugin loader runs :func:`install` in the launcher, the DP
controller, every scheduler and the detokenizer -- before the product's plugin, which is
discovered later on the path. The product package is not touched.

What is installed is chosen by ``SGLANG_E2E_DOUBLES`` (comma-separated):

* ``aiter``: the ``aiter`` package double (:mod:`testkit.doubles.aiter_kernels`);
* ``unified``: with ``aiter``, aiter's real Triton ``unified_attention`` behind it
  (:mod:`testkit.doubles.aiter_triton`, Triton's interpreter);
* ``rocm-host``: the plugin's ROCm host check answers "a ROCm host with aiter"
  (``sglang_aiter_plugin.backend``'s two questions return no problem);
* ``fill-value``: sglang's attention backends get ``get_cpu_graph_seq_len_fill_value`` (the
  backend's CUDA-graph fill value, else 1 as sglang's AMX backend answers), which DP
  attention's padding calls on CPU (0.5.23) and only sglang's AMX backends define;
* ``short-buffer``: the ``aiter-ext`` buffer named by ``SGLANG_E2E_SHORT_BUFFER`` cut one batch
  row short (:mod:`testkit.doubles.short_buffer`).

On a CUDA GPU:

* ``capture-safe``: with ``aiter``, the decode and extend kernels are the capture-safe GPU
  references (:mod:`testkit.doubles.aiter_gpu_kernels`); with ``unified``, aiter's Triton kernel
  comes from the tree named by :data:`AITER_TREE_VAR` (else the installed ``amd-aiter``) and
  runs with 16-token tiles (:func:`testkit.doubles.aiter_triton.tiles_of_at_least_16`); where
  the tree named by :data:`AITER_TREE_VAR` holds ``aiter/mla.py``, MLA decode is aiter's own
  ``mla_decode_fwd`` from it over the capture-safe stage-1 double
  (:mod:`testkit.doubles.aiter_mla_gpu`), else MLA has no kernel on the GPU;
* ``dual-gemm``: an import stand-in for ``sglang.kernels.ops.gemm.cutedsl_dual_gemm`` (0.5.23's
  MLP imports it on CUDA; the real module needs nvidia-cutlass-dsl): its mode enum, a decode
  token limit of 0, and "no dual GEMM" for every shape (float32 weights never choose it);
* ``native-ops`` (releases without ``SGLANG_FORCE_FUSED_OP_BACKEND``, 0.5.12): sglang's custom
  ops (RMSNorm, SiLU-and-mul, rotary) dispatch to their torch forward, as off CUDA;
* ``flashinfer-sampling`` (0.5.12, whose sampler imports ``flashinfer.sampling`` on CUDA at
  module level, before plugins load): an import stand-in package ``flashinfer`` in the site
  directory, every name of every submodule refusing (torch sampling is chosen;
  ``SGLANG_IS_FLASHINFER_AVAILABLE=false`` keeps the rest of sglang off flashinfer);
* ``graph-replays``: a recorder of sglang's own decode CUDA-graph runner: the sizes it captured
  (``graph captured bs=[1, 2, 4]``) and, for each replay, the graph's size and the real batch
  (``graph replay bs=4 raw_bs=3``); before each replay it sets the decode kernel's control
  flag from the flag file (:func:`testkit.doubles.aiter_kernels.refresh_control`).

:func:`site_dir` with ``gpu`` also writes ``sglang-kernel`` version metadata (a ``dist-info``
with no files) for the import stub, which sglang's engine asks for on CUDA.

Always: a recorder of the plugin's log lines per process (``<record dir>/<pid>.log``), standing in
for the application's log handler (the lines still reach stderr).

The ``sgl_kernel`` import stub is not installed here: sglang imports it before plugins load, so
the tests put ``gpu/wheelhouse`` (which holds it) on the server's ``PYTHONPATH``.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

__all__ = ["AITER_TREE_VAR", "DIST_NAME", "DOUBLES_VAR", "SGL_KERNEL_VERSION", "gpu_mla",
           "install", "site_dir"]

DOUBLES_VAR = "SGLANG_E2E_DOUBLES"
AITER_TREE_VAR = "SGLANG_E2E_AITER_TREE"
"""A copied aiter tree (the folder holding ``aiter/`` and ``AITER_ORIGIN``) for ``unified``."""
SGL_KERNEL_VERSION = "0.4.10"
"""The version the stub's metadata claims: at least what every supported release asks."""
DIST_NAME = "sglang_e2e_doubles"
ENTRY_POINT = "e2e_doubles"


class _Recorder(logging.Handler):
    """The plugin's records, one file per process; to stderr too while nothing else shows them."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter("[%(asctime)s] %(levelname)s %(name)s: %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        from testkit.doubles.aiter_kernels import record as write

        line = self.format(record)
        write(line)
        if not logging.getLogger().handlers:
            sys.stderr.write(line + "\n")


def _rocm_host() -> None:
    import sglang_aiter_plugin.backend as _availability

    # the double answers the plugin's two questions ("a ROCm torch with aiter?" and "does
    # `import aiter` work?") as an MI300 host with sglang's ROCm image would: no problem
    setattr(_availability, "host_problem", lambda: None)  # noqa: B010
    setattr(_availability, "aiter_problem", lambda: None)  # noqa: B010


def _fill_value() -> None:
    from sglang.srt.layers.attention.base_attn_backend import AttentionBackend

    if not hasattr(AttentionBackend, "get_cpu_graph_seq_len_fill_value"):
        def get_cpu_graph_seq_len_fill_value(self: AttentionBackend) -> int:
            # the backend's CUDA-graph fill value where it has one (aiter: 1); otherwise 1,
            # what sglang's own CPU backend (intel_amx) answers
            try:
                return int(self.get_cuda_graph_seq_len_fill_value())
            except NotImplementedError:
                return 1

        AttentionBackend.get_cpu_graph_seq_len_fill_value = get_cpu_graph_seq_len_fill_value


def _aiter(unified: bool, on_gpu: bool) -> None:
    from testkit.doubles import aiter_kernels

    kernel = None
    if unified:
        from testkit.doubles.aiter_triton import (
            installed_tree,
            loaded,
            tiles_of_at_least_16,
            tree_at,
        )

        named = os.environ.get(AITER_TREE_VAR)
        tree = tree_at(named) if named else installed_tree()
        if tree is None:
            raise RuntimeError(f"amd-aiter is not installed (bash tools/env.sh) and "
                               f"{AITER_TREE_VAR} names no tree")
        with loaded(tree) as found:
            origin = f"{found.module.__name__} ({tree.origin})"
            if on_gpu:
                tiles_of_at_least_16(found.module)
                origin += "; 2D kernel, KV tile >= 16"
            kernel = aiter_kernels.recording_unified(found.unified_attention, origin)
    mla = gpu_mla(os.environ.get(AITER_TREE_VAR)) if on_gpu else None
    aiter_kernels.install(unified=kernel, on_gpu=on_gpu, mla=mla)


def gpu_mla(named: str | None) -> Any:
    """aiter's own ``mla_decode_fwd`` from the tree ``named`` (:data:`AITER_TREE_VAR`) over the
    capture-safe stage-1 double, where that tree holds ``aiter/mla.py``; else ``None``."""
    if not named:
        return None
    from testkit.doubles.aiter_kernels import record
    from testkit.doubles.aiter_mla_gpu import MLA_FILE, load_mla
    from testkit.doubles.aiter_triton import tree_at

    tree = tree_at(named)
    if not (tree.root / MLA_FILE).is_file():
        return None
    record(f"mla_decode_fwd from aiter {tree.origin} ({MLA_FILE}; stage 1 a double)")
    return load_mla(tree).mla_decode_fwd


def _dual_gemm() -> None:
    import enum
    import types

    class DualGemmQuantMode(enum.IntEnum):
        STATIC_PER_TENSOR = 0
        STATIC_PER_TOKEN = 1
        DYNAMIC_PER_TENSOR = 2
        DYNAMIC_PER_TOKEN = 3
        UNQUANT = 4

        @property
        def is_quantized(self) -> bool:
            return self is not DualGemmQuantMode.UNQUANT

    def can_use_dual_gemm(*args: object, **kwargs: object) -> bool:
        return False

    stand_in = types.ModuleType("sglang.kernels.ops.gemm.cutedsl_dual_gemm",
                                "import stand-in (e2e double): no dual GEMM here")
    stand_in.__dict__.update(DualGemmQuantMode=DualGemmQuantMode,
                             can_use_dual_gemm=can_use_dual_gemm, MAX_DUAL_GEMM_DECODE_TOKENS=0)
    sys.modules[stand_in.__name__] = stand_in


_RUNNERS = (
    # (module, class, the method that replays one batch): 0.5.2x, then earlier releases
    ("sglang.srt.model_executor.runner.decode_cuda_graph_runner", "DecodeCudaGraphRunner",
     "execute"),
    ("sglang.srt.model_executor.cuda_graph_runner", "CudaGraphRunner", "replay"),
)


def _native_ops() -> None:
    import sglang.srt.layers.utils.multi_platform as dispatch

    dispatch._is_cuda = False


def _graph_replays() -> None:
    import functools
    import importlib

    from testkit.doubles.aiter_kernels import record, refresh_control

    for module_name, class_name, replay_name in _RUNNERS:
        try:
            runner = getattr(importlib.import_module(module_name), class_name)
        except (ImportError, AttributeError):
            continue
        capture, replay = runner.capture, getattr(runner, replay_name)

        @functools.wraps(capture)
        def recorded_capture(self: Any, *args: Any, _capture: Any = capture, **kwargs: Any) -> Any:
            out = _capture(self, *args, **kwargs)
            record(f"graph captured bs={sorted(self.capture_bs)}")
            return out

        @functools.wraps(replay)
        def recorded_replay(self: Any, forward_batch: Any, *args: Any, _replay: Any = replay,
                            **kwargs: Any) -> Any:
            refresh_control()
            out = _replay(self, forward_batch, *args, **kwargs)
            record(f"graph replay bs={self.bs} raw_bs={forward_batch.batch_size}")
            return out

        runner.capture = recorded_capture
        setattr(runner, replay_name, recorded_replay)
        return
    raise RuntimeError(f"graph-replays: no decode graph runner found ({_RUNNERS})")


def install() -> None:
    """The entry point: install what ``SGLANG_E2E_DOUBLES`` names in this process."""
    chosen = {x.strip() for x in os.environ.get(DOUBLES_VAR, "").split(",") if x.strip()}
    logging.getLogger("sglang_aiter_plugin").addHandler(_Recorder())
    if "aiter" in chosen:
        _aiter("unified" in chosen, on_gpu="capture-safe" in chosen)
    if "dual-gemm" in chosen:
        _dual_gemm()
    if "graph-replays" in chosen:
        _graph_replays()
    if "native-ops" in chosen:
        _native_ops()
    if "rocm-host" in chosen:
        _rocm_host()
    if "fill-value" in chosen:
        _fill_value()
    if "short-buffer" in chosen:
        from testkit.doubles import short_buffer

        short_buffer.install()
    from testkit.doubles.aiter_kernels import record

    record(f"e2e doubles installed: {','.join(sorted(chosen)) or 'none'}")


_FLASHINFER = '''"""Import stand-in (e2e double): no flashinfer here. Every name of every
``flashinfer.*`` module exists (sglang 0.5.12 imports several at module level once the package
is found) and refuses when called; torch sampling runs instead."""

import importlib.abc
import importlib.machinery
import sys
import types


class _Refusing:
    """A name of flashinfer: its attributes are names too (``ActivationType.Swiglu``); calling
    one refuses."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Refusing(f"{self._name}.{attr}")

    def __call__(self, *args, **kwargs):
        raise NotImplementedError(f"{self._name}: flashinfer import stand-in (e2e double)")

    def __repr__(self):
        return f"<{self._name}: flashinfer import stand-in>"


def _getattr(module):
    def __getattr__(attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _Refusing(f"{module}.{attr}")

    return __getattr__


__getattr__ = _getattr(__name__)


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.startswith(__name__ + "."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = types.ModuleType(spec.name)
        module.__path__ = []
        module.__getattr__ = _getattr(spec.name)
        return module

    def exec_module(self, module):
        return None


sys.meta_path.append(_Finder())
'''


def site_dir(root: Path, *, gpu: bool = False, doubles: str = "") -> Path:
    """Write the test-only distribution under ``root`` (a ``PYTHONPATH`` entry); return it.
    ``gpu``: also the ``sglang-kernel`` version metadata for the import stub; ``doubles`` naming
    ``flashinfer-sampling``: that import stand-in."""
    if "flashinfer-sampling" in doubles.split(","):
        package = root / "flashinfer"
        package.mkdir(parents=True, exist_ok=True)
        (package / "__init__.py").write_text(_FLASHINFER)
    info = root / f"{DIST_NAME}-0.0.0.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {DIST_NAME}\nVersion: 0.0.0\n")
    (info / "entry_points.txt").write_text(
        f"[sglang.srt.plugins]\n{ENTRY_POINT} = {__name__}:install\n")
    if gpu:
        stub = root / f"sglang_kernel-{SGL_KERNEL_VERSION}.dist-info"
        stub.mkdir(exist_ok=True)
        (stub / "METADATA").write_text(
            f"Metadata-Version: 2.1\nName: sglang-kernel\nVersion: {SGL_KERNEL_VERSION}\n"
            "Summary: version metadata for the sgl_kernel import stub (e2e double)\n")
    return root
