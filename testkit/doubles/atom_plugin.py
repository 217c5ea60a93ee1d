"""Double of ROCm/ATOM's sglang plugin (``atom_sglang``, snapshot 2026-08-22) on the symbols this
plugin wraps, as a test-only entry-point plugin of ``sglang.srt.plugins``.

ATOM's ``graph_capture_patch.py`` wraps sglang's ``GroupCoordinator.graph_capture`` (keeping
``__wrapped__``, through ``functools.wraps``) so that it first enters the ``capture()`` of aiter's
own TP group's communicator (the groups ATOM's ``init_aiter_dist`` builds, not sglang's), then
sglang's capture; its ``register_plugin()`` patches the decode graph runner's per-shape capture.
:func:`register` does both at register time (ATOM wraps ``graph_capture`` when it prepares an ATOM
model, later still) and records, per capture, the registration flag of the coordinator's
communicator and of aiter's group's one, where its wrapper and the capture's body see them.

:func:`site_dirs` writes the distributions a test puts on ``PYTHONPATH``: this double
(``atom_like``), a ROCm-host double (``test_rocm``: the plugin's collective fixes decide as on an
MI300X, :func:`testkit.doubles.rocm_platform.for_the_plugin`), and a second
copy of the plugin's own entry point (``aiter_ext``), which placed before the double's folder
makes sglang's loader call the plugin first.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from testkit.distributions import write_distribution
from testkit.doubles.communicator import RecordingCommunicator

__all__ = ["AITER_GROUP", "DECODE_CAPTURES", "ENTRY_POINT", "FLAG", "events", "installed",
           "register", "site_dirs"]

ENTRY_POINT = "atom_like"
GROUP = "sglang.srt.plugins"
FLAG = "enable_register_for_capturing"
#: sglang's decode graph runner's per-shape capture, per release: (module, class, method)
DECODE_CAPTURES = (
    ("sglang.srt.model_executor.runner.decode_cuda_graph_runner", "DecodeCudaGraphRunner",
     "capture_one_shape"),
    ("sglang.srt.model_executor.cuda_graph_runner", "CudaGraphRunner", "capture_one_batch_size"),
)
AITER_GROUP = RecordingCommunicator(capturing=False)
"""The communicator of aiter's own TP group, which ATOM's wrapper enters."""
events: list[list[Any]] = []
installed: dict[str, Any] = {}


def _stand_in(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    @contextlib.contextmanager
    def graph_capture(self: Any, *args: Any, **kwargs: Any) -> Iterator[Any]:
        with AITER_GROUP.capture():
            events.append(["entering", getattr(self.ca_comm, FLAG)])
            with original(self, *args, **kwargs) as context:
                events.append(["entered", getattr(self.ca_comm, FLAG)])
                yield context
            events.append(["left", getattr(self.ca_comm, FLAG)])

    return graph_capture


def _passing(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def capture(*args: Any, **kwargs: Any) -> Any:
        return original(*args, **kwargs)

    return capture


def register() -> None:
    """The double's entry point: wrap ``graph_capture`` and the decode per-shape capture."""
    from sglang.srt.distributed import parallel_state

    cls = parallel_state.GroupCoordinator
    cls.graph_capture = installed["graph_capture"] = _stand_in(cls.graph_capture)
    for module, holder, name in DECODE_CAPTURES:
        try:
            runner = getattr(importlib.import_module(module), holder)
        except ImportError:
            continue
        setattr(runner, name, _passing(getattr(runner, name)))


def site_dirs(root: Path) -> dict[str, Path]:
    """The three distributions, each in a folder of its own under ``root``: ``atom``, ``rocm``
    and ``ext`` (``PYTHONPATH`` order is sglang's load order)."""
    dirs = {"atom": root / "atom", "rocm": root / "rocm", "ext": root / "ext"}
    write_distribution(dirs["atom"], "atom-like", modules={},
                       entry_points={GROUP: {ENTRY_POINT: f"{__name__}:register"}})
    write_distribution(dirs["rocm"], "sglang-test-rocm", modules={}, entry_points={
        GROUP: {"test_rocm": "testkit.doubles.rocm_platform:for_the_plugin"}})
    write_distribution(dirs["ext"], "sglang-aiter-plugin", modules={}, entry_points={
        GROUP: {"aiter_ext": "sglang_aiter_plugin:register"}})
    return dirs
