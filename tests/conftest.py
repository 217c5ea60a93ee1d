"""Test set-up shared by every test: the real sglang release, with aiter blocked (no ROCm here)."""

from __future__ import annotations

import sys

import pytest

# amd-aiter raises RuntimeError (not ImportError) off ROCm; sglang's guards expect ImportError.
sys.modules.setdefault("aiter", None)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def plugins_loaded() -> None:
    """sglang's own loader, run once in the test process, as in a launcher."""
    from sglang.srt.plugins import load_plugins

    load_plugins()


@pytest.fixture(scope="session")
def sglang_version():  # type: ignore[no-untyped-def]
    from sglang_aiter_plugin._sglang import installed_sglang_version

    v = installed_sglang_version()
    assert v is not None, "the tests need sglang installed (tools/env.sh)"
    return v
