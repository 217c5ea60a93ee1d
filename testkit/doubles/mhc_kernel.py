"""Double of the JIT HIP kernel behind sglang's ``all_reduce_mhc_post`` (0.5.21+,
``sglang/kernels/ops/communication/all_reduce_mhc_hip.py``), and of the aiter modules that file
imports (aiter's communicator class, ``AITER_CSRC_DIR``): neither exists without ROCm.

:func:`aiter_modules` gives the modules to put in ``sys.modules`` before importing sglang's op;
:func:`install` makes the op's kernel a :class:`MhcKernel`, which records each launch.
"""

from __future__ import annotations

import types
from typing import Any

from testkit.doubles.communicator import RecordingCommunicator

__all__ = ["MhcKernel", "aiter_modules", "install"]


def aiter_modules() -> dict[str, types.ModuleType]:
    """``aiter.dist.device_communicators.custom_all_reduce`` (its ``CustomAllreduce``: the
    communicator double) and ``aiter.jit.core`` (``AITER_CSRC_DIR``), with their parents."""
    names = ("aiter", "aiter.dist", "aiter.dist.device_communicators",
             "aiter.dist.device_communicators.custom_all_reduce", "aiter.jit", "aiter.jit.core")
    modules = {name: types.ModuleType(name) for name in names}
    for name, module in modules.items():
        module.__path__ = []  # a package: its children import
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(modules[parent], child, module)
    modules["aiter.dist.device_communicators.custom_all_reduce"].CustomAllreduce = (  # type: ignore[attr-defined]
        RecordingCommunicator)
    modules["aiter.jit.core"].AITER_CSRC_DIR = "/nonexistent/aiter/csrc"  # type: ignore[attr-defined]
    return modules


class MhcKernel:
    """The kernel's ``run``, as the op calls it: each launch recorded with the pool it was given
    (``0, 0`` during a capture: the peers' addresses are registered when the scope ends)."""

    def __init__(self) -> None:
        self.launches: list[dict[str, int]] = []

    def run(self, ptr: int, input: Any, output: Any, residual: Any, post: Any, comb: Any,
            pool_ptr: int, pool_size: int) -> None:
        self.launches.append({"ptr": ptr, "pool_ptr": pool_ptr, "pool_size": pool_size})


def install(op_module: Any) -> MhcKernel:
    """Make the op module's kernel (its ``_all_reduce_mhc_module()``) a :class:`MhcKernel`."""
    kernel = MhcKernel()
    op_module._all_reduce_mhc_module = lambda: kernel
    return kernel
