"""Backends built through sglang's own configuration, one scenario at a time."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backend.sglang_setup import SCENARIOS, Setup, configure, write_model_dir


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
    """``request.param``: a scenario name from :data:`SCENARIOS`."""
    setup = configure(model_dir, SCENARIOS[request.param])
    with setup.scope:
        yield setup
