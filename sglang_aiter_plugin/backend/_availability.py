"""Whether the ROCm ``aiter`` package can run here, answered once with a precise reason."""

from __future__ import annotations

import functools
import importlib
import sys

__all__ = ["AiterUnavailableError", "aiter_problem", "require_aiter"]


class AiterUnavailableError(RuntimeError):
    """``aiter-ext`` was selected on a machine where AMD's aiter kernels cannot run."""


@functools.lru_cache(maxsize=1)
def aiter_problem() -> str | None:
    """``None`` when ``import aiter`` works on a ROCm build of torch; otherwise why not."""
    import torch

    hip = getattr(torch.version, "hip", None)
    if not hip:
        return (
            f"this torch ({torch.__version__}) is not a ROCm build; aiter-ext runs only on AMD "
            "GPUs with ROCm"
        )
    if "aiter" in sys.modules and sys.modules["aiter"] is None:
        return "import of aiter is blocked in this process (sys.modules['aiter'] is None)"
    try:
        importlib.import_module("aiter")
    except Exception as exc:  # amd-aiter raises RuntimeError, not ImportError, off ROCm
        return f"`import aiter` failed: {type(exc).__name__}: {exc}"
    return None


def require_aiter() -> None:
    problem = aiter_problem()
    if problem is not None:
        raise AiterUnavailableError(
            f"--attention-backend aiter-ext cannot run here: {problem}. Use sglang's ROCm image "
            "(it ships aiter) on an MI300/MI355-class GPU, or choose another attention backend "
            "(e.g. --attention-backend triton)."
        )
