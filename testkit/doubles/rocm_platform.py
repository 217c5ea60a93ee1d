"""Double of an MI300-class ROCm host, for sglang's platform probes (there is no AMD GPU here).

sglang asks ``sglang.srt.utils.common`` what machine it runs on (``is_hip()``, ``is_cuda()``,
``get_device_capability()``, ...). 0.5.17+ reads them through ``runtime_context`` (which calls
the ``utils.common`` attribute each time); older releases call the functions they imported by
name. The double replaces each probe in ``utils.common`` and every already imported ``sglang``
module that holds the same function object, and puts them back on exit.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["MI300_FACTS", "rocm_host", "simulated_rocm"]

GIB_IN_MB = 1024
MI300_FACTS: dict[str, Any] = {
    "is_hip": True,
    "is_cuda": False,
    "is_cuda_alike": True,
    "is_npu": False,
    "is_xpu": False,
    "is_musa": False,
    "is_mps": False,
    "is_cpu": False,
    "is_hpu": False,
    "is_sm90_supported": False,
    "is_sm100_supported": False,
    "is_sm100_or_sm110_supported": False,
    "is_sm110_supported": False,
    "is_sm120_supported": False,
    "is_blackwell_supported": False,
    "is_blackwell": False,
    "is_hopper_with_cuda_12_3": False,
    "is_flashinfer_available": False,
    "cpu_has_amx_support": False,
    "is_gfx95_supported": False,
    "get_device_sm": 94,
    "get_device_capability": (9, 4),
    "get_device_memory_capacity": 192 * GIB_IN_MB,
}


def _const(value: Any) -> Callable[..., Any]:
    def probe(*_: Any, **__: Any) -> Any:
        return value

    return probe


def _sglang_namespaces() -> Iterator[dict[str, Any]]:
    for module in list(sys.modules.values()):
        if module is not None and getattr(module, "__name__", "").startswith("sglang"):
            yield getattr(module, "__dict__", {})


def _swap(table: dict[int, Any]) -> list[tuple[dict[str, Any], str, Any]]:
    swapped = []
    for namespace in _sglang_namespaces():
        for attr, value in list(namespace.items()):
            new = table.get(id(value))
            if new is not None:
                swapped.append((namespace, attr, value))
                namespace[attr] = new
    return swapped


@contextlib.contextmanager
def simulated_rocm(**overrides: Any) -> Iterator[None]:
    """Every sglang platform probe answers as on an MI300X (gfx942, 192 GiB) inside the block,
    and so does the plugin's own question whether this host can run aiter (ROCm torch and an
    aiter package: :func:`rocm_host`)."""
    from sglang.srt.utils import common

    facts = {**MI300_FACTS, **overrides}
    originals = {n: getattr(common, n) for n in facts if hasattr(common, n)}
    fakes = {n: _const(facts[n]) for n in originals}
    _swap({id(originals[n]): fakes[n] for n in originals})
    try:
        with rocm_host():
            yield
    finally:  # also the copies taken by modules first imported inside the block
        _swap({id(fakes[n]): originals[n] for n in originals})


@contextlib.contextmanager
def rocm_host() -> Iterator[None]:
    """The plugin's host check answers as on a ROCm machine with aiter installed."""
    import sglang_aiter_plugin.backend as _availability

    original = _availability.host_problem
    _availability.host_problem = lambda: None
    try:
        yield
    finally:
        _availability.host_problem = original



def for_the_plugin() -> None:
    """The plugin's collective fixes decide as on ROCm for the rest of the process, sglang's own
    later imports as on this host (as a test-only sglang plugin's entry point, which sglang's
    loader calls before the plugin's: :func:`testkit.doubles.atom_plugin.site_dirs`).
    sglang's ``parallel_state`` is imported under :func:`simulated_rocm`, and sglang's
    ``utils.is_hip`` then answers yes to the plugin's code only: a module that sglang's model
    code imports later (its quantization kernels ask the GPU's architecture at import) sees a
    CPU host."""
    import importlib

    with simulated_rocm():
        importlib.import_module("sglang.srt.distributed.parallel_state")
    utils = importlib.import_module("sglang.srt.utils")
    real = utils.is_hip

    def is_hip() -> bool:
        caller = sys._getframe(1).f_globals.get("__name__", "")
        return True if caller.startswith("sglang_aiter_plugin") else bool(real())

    setattr(utils, "is_hip", is_hip)  # noqa: B010  (the name the plugin's fixes look up)
