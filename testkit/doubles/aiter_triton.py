"""Loader for aiter's Triton ``unified_attention`` on a machine without ROCm.

``import aiter`` runs aiter's ROCm JIT set-up and fails without ROCm, but ``unified_attention`` is
plain Triton: it runs on an NVIDIA GPU and, slowly, under Triton's CPU interpreter
(``TRITON_INTERPRET=1``). This module imports the real kernel from an aiter source tree without
``aiter/__init__.py``. What it stands in for (the double) is the ROCm host, nothing of the kernel:

* empty parent packages ``aiter``, ``aiter.ops`` and ``aiter.ops.triton`` whose ``__path__`` is the
  tree, so the kernel's own modules import by their real names; ``aiter.jit`` (the ROCm JIT) is
  blocked, so aiter's compute-unit query takes its torch fallback;
* a HIP target (an MI300X, gfx942) for Triton's driver only while aiter's arch-detection modules
  import (``utils/_triton/arch_info``, ``utils/types``), which read the target at import time;
* on CUDA, the AMD-only launch options aiter passes (``waves_per_eu`` and the like), which
  Triton's CUDA backend rejects, are dropped at launch;
* on NVIDIA at page size 1, :func:`tiles_of_at_least_16` (asked for explicitly), since Triton's
  NVIDIA backend cannot compile aiter's 1-token decode tile;
* without a GPU (the interpreter), the compute-unit count aiter sizes its grid by is a value
  given here (``num_sms``), since there is no device to ask.

:func:`loaded` restores ``sys.modules`` and Triton's driver on exit; the kernel function it
yields stays usable after that (its modules keep their globals). :class:`AiterTree` records which
tree (PyPI wheel or a git commit) a result came from.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import sys
import types
from collections.abc import Callable, Iterator
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = [
    "AMD_ONLY_LAUNCH_OPTIONS",
    "AiterTree",
    "LoadedKernel",
    "installed_tree",
    "loaded",
    "tiles_of_at_least_16",
    "tree_at",
]

PYPI_DISTRIBUTION = "amd-aiter"
TEST_TREE_DIR = "opt/amd-aiter"
"""Where ``tools/env.sh`` installs ``amd-aiter`` (``--target``), relative to ``sys.prefix``."""
ORIGIN_FILE = "AITER_ORIGIN"
"""A one-line text file beside a copied tree's ``aiter/`` naming where it came from."""

ENTRY_MODULES = (
    "aiter.ops.triton.attention.unified_attention",  # ROCm/aiter since 2026 (sglang 0.5.23)
    "aiter.ops.triton.unified_attention",  # amd-aiter 0.1.7 (PyPI)
)
ARCH_MODULES = ("aiter.ops.triton.utils._triton.arch_info", "aiter.ops.triton.utils.types")
STUB_PACKAGES = ("aiter", "aiter.ops", "aiter.ops.triton")
BLOCKED = ("aiter.jit",)

AMD_ONLY_LAUNCH_OPTIONS = frozenset(
    {"waves_per_eu", "matrix_instr_nonkdim", "kpack", "schedule_hint", "instruction_sched_variant"}
)
HIP_ARCH, HIP_WARP_SIZE = "gfx942", 64
MI300X_COMPUTE_UNITS = 304
MIN_TILE = 16
"""Triton's NVIDIA backend compiles ``tl.dot`` only for K >= 16; aiter's decode tile is the page
size."""


@dataclasses.dataclass(frozen=True)
class AiterTree:
    """An aiter source tree: ``root`` holds the ``aiter`` package; ``origin`` says whence."""

    root: Path
    origin: str

    @property
    def entry_module(self) -> str:
        for name in ENTRY_MODULES:
            if (self.root / (name.replace(".", "/") + ".py")).is_file():
                return name
        raise FileNotFoundError(
            f"no unified_attention module under {self.root / 'aiter'} (looked for "
            f"{', '.join(ENTRY_MODULES)}); point tree_at() at the folder that holds aiter/"
        )


def installed_tree() -> AiterTree | None:
    """The ``amd-aiter`` wheel's tree (a test dependency), or ``None`` when it is not installed.

    ``tools/env.sh`` installs it into ``<venv>/opt/amd-aiter``, off ``sys.path`` (importable as
    ``aiter`` it would stop sglang's own imports off ROCm); an ``amd-aiter`` installed as a
    distribution is found too.
    """
    root = Path(sys.prefix) / TEST_TREE_DIR
    infos = sorted(root.glob("amd_aiter-*.dist-info"))
    if (root / "aiter").is_dir() and infos:
        dist: metadata.Distribution = metadata.PathDistribution(infos[-1])
    else:
        try:
            dist = metadata.distribution(PYPI_DISTRIBUTION)
        except metadata.PackageNotFoundError:
            return None
        root = Path(str(dist.locate_file(""))).resolve()
        if not (root / "aiter").is_dir():
            return None
    return AiterTree(root, f"PyPI {PYPI_DISTRIBUTION}=={dist.version}")


def tree_at(root: str | Path, origin: str | None = None) -> AiterTree:
    """A copied tree at ``root`` (the folder holding ``aiter/``); ``origin`` defaults to the
    first line of ``root/AITER_ORIGIN``."""
    path = Path(root).resolve()
    if not (path / "aiter").is_dir():
        raise FileNotFoundError(f"{path} holds no aiter/ folder; pass the folder above aiter/")
    if origin is None:
        marker = path / ORIGIN_FILE
        if not marker.is_file():
            raise FileNotFoundError(
                f"{marker} is missing: write the tree's origin (e.g. 'ROCm/aiter git <commit>') "
                "there or pass origin="
            )
        origin = marker.read_text().splitlines()[0].strip()
    return AiterTree(path, origin)


@dataclasses.dataclass(frozen=True)
class LoadedKernel:
    """``unified_attention`` as loaded from ``tree`` (``module`` is its defining module)."""

    tree: AiterTree
    module: types.ModuleType
    unified_attention: Callable[..., Any]


class _HipTargetDriver:
    """Answers Triton's target query with an MI300X while aiter's arch modules import."""

    def get_current_target(self) -> Any:
        from triton.backends.compiler import GPUTarget

        return GPUTarget("hip", HIP_ARCH, HIP_WARP_SIZE)


@contextlib.contextmanager
def _hip_target() -> Iterator[None]:
    from triton.runtime import driver

    saved = driver._active  # the public property would create the (absent) default driver
    driver.set_active(_HipTargetDriver())
    try:
        yield
    finally:
        driver._active = saved


def _interpreting() -> bool:
    import os

    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def _drop_amd_options(kernel: Any) -> None:
    """Make a JIT kernel ignore AMD-only launch options (Triton's CUDA backend rejects them);
    a name that is one of the kernel's own parameters is passed on."""
    run = kernel.run
    dropped = AMD_ONLY_LAUNCH_OPTIONS.difference(kernel.arg_names)

    @functools.wraps(run)
    def run_without_amd_options(*args: Any, **kwargs: Any) -> Any:
        for name in dropped.intersection(kwargs):
            del kwargs[name]
        return run(*args, **kwargs)

    kernel.run = run_without_amd_options


def _jit_kernels(module: types.ModuleType) -> list[Any]:
    from triton.runtime.jit import JITFunction

    return [v for v in vars(module).values() if isinstance(v, JITFunction)]


@contextlib.contextmanager
def loaded(tree: AiterTree, *, num_sms: int | None = None) -> Iterator[LoadedKernel]:
    """Import ``unified_attention`` from ``tree``; undo every ``sys.modules`` change on exit.

    ``num_sms``: the compute-unit count aiter sizes its launch by. Needed without a GPU (default
    there: an MI300X's 304); on a GPU aiter asks torch unless this is given.
    """
    import torch

    entry = tree.entry_module
    saved = {k: v for k, v in sys.modules.items() if k == "aiter" or k.startswith("aiter.")}
    try:
        for name in list(saved):
            del sys.modules[name]
        for name in STUB_PACKAGES:
            package = types.ModuleType(name)
            package.__path__ = [str(tree.root / name.replace(".", "/"))]
            package.__file__ = None
            sys.modules[name] = package
        for name in BLOCKED:
            sys.modules[name] = None  # type: ignore[assignment]
        with _hip_target():
            for name in ARCH_MODULES:
                importlib.import_module(name)
        module = importlib.import_module(entry)
        on_gpu = torch.cuda.is_available() and not _interpreting()
        if num_sms is not None or not on_gpu:
            count = num_sms if num_sms is not None else MI300X_COMPUTE_UNITS
            module.get_num_sms = lambda: count  # type: ignore[attr-defined]
        if on_gpu:
            kernels_module = sys.modules[_kernels_module(entry)]
            for kernel in _jit_kernels(kernels_module):
                _drop_amd_options(kernel)
        yield LoadedKernel(tree, module, module.unified_attention)
    finally:
        for name in [k for k in sys.modules if k == "aiter" or k.startswith("aiter.")]:
            del sys.modules[name]
        sys.modules.update(saved)


def tiles_of_at_least_16(module: types.ModuleType) -> None:
    """Run aiter's 2D unified kernel with a KV tile of 16 tokens where its decode configuration
    picks the page size (1), which Triton's NVIDIA backend cannot compile.

    The kernel gathers each tile token by token through the page table (``seq_offset //
    BLOCK_SIZE``, masked at the sequence end), as aiter's own prefill configuration does with
    64-token tiles over 1-token pages; which table entries it reads is unchanged. The 3D
    (split) kernel is not used: it derives its gather count from the tile.
    """
    select_2d = module.select_2d_config

    def select_2d_config(*args: Any, **kw: Any) -> Any:
        config = select_2d(*args, **kw)
        config["TILE_SIZE"] = max(MIN_TILE, config["TILE_SIZE"])
        return config

    module.select_2d_config = select_2d_config  # type: ignore[attr-defined]
    module.use_2d_kernel = lambda *args, **kw: True  # type: ignore[attr-defined]


def _kernels_module(entry: str) -> str:
    """Where the entry module's ``@triton.jit`` kernels live: ``_triton_kernels`` beside it."""
    prefix = "aiter.ops.triton."
    return prefix + "_triton_kernels." + entry[len(prefix) :]
