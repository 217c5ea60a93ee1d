"""The self-test's sglang configuration (:mod:`sglang_aiter_plugin.selftest.sglang_setup`) with
the one name sglang's aiter backend binds only beside aiter, for machines without it, and the
scenarios only the tests use beside the self-test's own."""

from __future__ import annotations

from pathlib import Path

from sglang_aiter_plugin.selftest import sglang_setup as _setup
from sglang_aiter_plugin.selftest.sglang_setup import (
    CAPTURE_LIST,
    POOL,
    Scenario,
    Setup,
    write_model_dir,
)
from sglang_aiter_plugin.selftest.sglang_setup import SCENARIOS as SELFTEST_SCENARIOS

__all__ = ["CAPTURE_LIST", "POOL", "SCENARIOS", "Scenario", "Setup", "configure",
           "write_model_dir"]


SCENARIOS: dict[str, Scenario] = {
    **SELFTEST_SCENARIOS,
    "dp-attention-tp4": Scenario(
        "dp-attention-tp4",
        ("--tp", "8", "--attn-dp-size", "2"),
        ("--tp", "8", "--dp-size", "2", "--enable-dp-attention"),
        4,
    ),
    "plain": Scenario("plain", (), (), 1),
}
"""The self-test's scenarios (two-batch overlap, DP attention at attention-TP 2), DP attention at
attention-TP 4, and neither."""


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
