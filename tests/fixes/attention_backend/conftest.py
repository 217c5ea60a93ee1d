"""Fixtures of the attention-backend tests: model directories and the resolutions, computed once."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglang_aiter_plugin.fixes.attention_backend.choice import SELECTED_ENV
from tests.fixes.attention_backend.launches import Resolutions, warm_up, write_models


@pytest.fixture(scope="session")
def models(plugins_loaded: None, tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    paths = write_models(Path(tmp_path_factory.mktemp("fixtures")))
    warm_up(paths)
    return paths


@pytest.fixture(scope="session")
def resolutions(models: dict[str, str]) -> Resolutions:
    return Resolutions(models)


@pytest.fixture(autouse=True)
def _no_leftover_choice(monkeypatch: pytest.MonkeyPatch) -> None:
    """Resolutions write the choice into the environment; keep it out of the next test."""
    monkeypatch.delenv(SELECTED_ENV, raising=False)
