"""Test set-up shared by every test: the real sglang release, with aiter blocked (no ROCm here)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.version import Version

from testkit.sglang_setup import SCENARIOS, Setup, configure, write_model_dir

# amd-aiter raises RuntimeError (not ImportError) off ROCm; sglang's guards expect ImportError.
sys.modules.setdefault("aiter", None)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def plugins_loaded() -> None:
    """sglang's own loader, run once in the test process, as in a launcher."""
    from sglang.srt.plugins import load_plugins

    load_plugins()


@pytest.fixture(scope="session")
def sglang_version() -> Version:
    from sglang_aiter_plugin._sglang import installed_sglang_version

    v = installed_sglang_version()
    assert v is not None, "the tests need sglang installed (tools/env.sh)"
    return v


@pytest.fixture(scope="session")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("model") / "tiny-llama")


@pytest.fixture(scope="session")
def mla_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_model_dir(tmp_path_factory.mktemp("model") / "tiny-deepseek-v2", mla=True)


@pytest.fixture
def mla_setup(mla_model_dir: Path) -> Iterator[Setup]:
    """An MLA model under two-batch overlap."""
    setup = configure(mla_model_dir, SCENARIOS["two-batch-overlap"])
    with setup.scope:
        yield setup


@pytest.fixture
def sglang_setup(request: pytest.FixtureRequest, model_dir: Path) -> Iterator[Setup]:
    """``request.param``: a scenario name from :data:`SCENARIOS` (default: ``plain``)."""
    setup = configure(model_dir, SCENARIOS[getattr(request, "param", "plain")])
    with setup.scope:
        yield setup


@pytest.fixture
def construction_sites(plugins_loaded: None) -> None:
    """sglang's aiter construction sites wrapped, as after a launch in this process chose
    aiter-ext (a launch without it leaves them alone while the registry is not imported)."""
    import importlib

    from sglang_aiter_plugin.fixes.attention_backend.fix import REGISTRY_MODULE
    from sglang_aiter_plugin.fixes.attention_backend.sites import install_construction_sites

    install_construction_sites(importlib.import_module(REGISTRY_MODULE))
