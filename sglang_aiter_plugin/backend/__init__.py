"""The ``aiter-ext`` backend: its classes (:mod:`.classes`), their buffer pool (:mod:`.pool`),
the batch rows it must hold (:mod:`.capacity`), and here whether aiter can run at all.

Whether the ROCm ``aiter`` package can run here is asked at two moments:

* :func:`host_problem` -- cheap, without importing aiter: a ROCm build of torch, and an ``aiter``
  package that Python can find. Asked where the choice of ``aiter-ext`` is first seen (the start
  of sglang's argument resolution), so a machine that cannot run it stops before sglang detects
  devices or loads weights.
* :func:`aiter_problem` -- ``import aiter`` itself (its JIT needs ROCm). Asked when the backend is
  built and by ``doctor``.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys

from sglang_aiter_plugin._errors import AiterExtError

__all__ = ["AiterUnavailableError", "aiter_problem", "host_problem", "require_aiter",
           "require_rocm_host"]

WAY_OUT = (
    "Use sglang's ROCm image (it ships aiter) on an MI300/MI355-class GPU, or choose another "
    "attention backend (e.g. {flag} triton)."
)


class AiterUnavailableError(AiterExtError, RuntimeError):
    """``aiter-ext`` was selected on a machine where AMD's aiter kernels cannot run."""


def host_problem() -> str | None:
    """``None`` on a ROCm build of torch with an importable-looking ``aiter``; else why not."""
    import torch

    if not getattr(torch.version, "hip", None):
        return (f"this torch ({torch.__version__}) is not a ROCm build; aiter-ext runs only on AMD "
                "GPUs with ROCm")
    if "aiter" in sys.modules and sys.modules["aiter"] is None:
        return "import of aiter is blocked in this process (sys.modules['aiter'] is None)"
    if "aiter" not in sys.modules and importlib.util.find_spec("aiter") is None:
        return f"no aiter package is installed for this Python ({sys.executable})"
    return None


@functools.lru_cache(maxsize=1)
def aiter_problem() -> str | None:
    """``None`` when ``import aiter`` works on a ROCm build of torch; otherwise why not."""
    if (problem := host_problem()) is not None:
        return problem
    try:
        importlib.import_module("aiter")
    except Exception as exc:  # amd-aiter raises RuntimeError, not ImportError, off ROCm
        return f"`import aiter` failed: {type(exc).__name__}: {exc}"
    return None


def _raise_if(problem: str | None, flag: str = "--attention-backend") -> None:
    if problem is not None:
        raise AiterUnavailableError(f"{flag} aiter-ext cannot run here: {problem}. "
                                    f"{WAY_OUT.format(flag=flag)}")


def require_rocm_host(flag: str = "--attention-backend") -> None:
    """Raise :class:`AiterUnavailableError` if :func:`host_problem` finds one (no aiter import);
    its message names ``flag``, the option that selected ``aiter-ext``."""
    _raise_if(host_problem(), flag)


def require_aiter() -> None:
    """Raise :class:`AiterUnavailableError` unless ``import aiter`` works here."""
    _raise_if(aiter_problem())
