"""The ``aiter-ext`` backend (its modules: docs/architecture.md); here whether aiter can run:
:func:`host_problem` without importing aiter (asked where the choice of ``aiter-ext`` is first
seen, before sglang detects devices or loads weights), :func:`aiter_problem` with ``import aiter``.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys

from sglang_aiter_plugin._errors import AiterExtError

__all__ = ["AiterUnavailableError", "aiter_problem", "host_problem", "require_aiter"]


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


def require_aiter(flag: str = "--attention-backend", *, host_only: bool = False) -> None:
    """Raise :class:`AiterUnavailableError` unless ``import aiter`` works here (``host_only``: if
    :func:`host_problem` finds one, without importing aiter); its message names ``flag``, the
    option that selected ``aiter-ext``."""
    problem = host_problem() if host_only else aiter_problem()
    if problem is not None:
        raise AiterUnavailableError(
            f"{flag} aiter-ext cannot run here: {problem}. Use sglang's ROCm image (it ships "
            f"aiter) on an MI300/MI355-class GPU, or choose another attention backend (e.g. "
            f"{flag} triton).")
