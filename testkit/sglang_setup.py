"""The self-test's sglang configuration (:mod:`sglang_aiter_plugin.selftest.sglang_setup`) with
the one name sglang's aiter backend binds only beside aiter, for machines without it."""

from __future__ import annotations

from pathlib import Path

from sglang_aiter_plugin.selftest import sglang_setup as _setup
from sglang_aiter_plugin.selftest.sglang_setup import (
    CAPTURE_LIST,
    POOL,
    SCENARIOS,
    Scenario,
    Setup,
    write_model_dir,
)

__all__ = ["CAPTURE_LIST", "POOL", "SCENARIOS", "Scenario", "Setup", "configure",
           "write_model_dir"]


def configure(
    model_dir: Path,
    scenario: Scenario,
    extra: tuple[str, ...] = (),
    *,
    device: str = "cpu",
    pool: int = POOL,
) -> Setup:
    """:func:`sglang_aiter_plugin.selftest.sglang_setup.configure`, after binding the name (graph
    set-up runs the backend's metadata code)."""
    from sglang.srt.layers.attention import aiter_backend

    from testkit.doubles import aiter_backend_imports

    aiter_backend_imports.install(aiter_backend)
    return _setup.configure(model_dir, scenario, extra, device=device, pool=pool)
