"""The choice of aiter-ext survives pickling and reaches a ``spawn`` child that loads plugins."""

from __future__ import annotations

import multiprocessing
import pickle
from typing import Any

import pytest

from sglang_aiter_plugin.fixes.attention_backend.choice import (
    MARKER_ATTR,
    SELECTED_ENV,
    is_selected,
)
from tests.fixes.attention_backend import child
from tests.fixes.attention_backend.launches import Resolutions


def _resolved(resolutions: Resolutions, backend: str) -> Any:
    outcome = resolutions.get("llama-32k", backend)
    assert outcome.error is None, outcome.error
    return outcome


def test_the_marker_survives_pickling(resolutions: Resolutions) -> None:
    record = _resolved(resolutions, "aiter-ext").record
    copy = pickle.loads(pickle.dumps(record))
    assert getattr(copy, MARKER_ATTR) == "aiter-ext"
    assert is_selected(copy)
    assert getattr(copy, "_resolution_finished", None) == getattr(
        record, "_resolution_finished", None
    )
    stock = pickle.loads(pickle.dumps(_resolved(resolutions, "aiter").record))
    assert not is_selected(stock)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["aiter-ext", "aiter"])
def test_a_spawn_child_sees_the_choice(
    resolutions: Resolutions, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    outcome = _resolved(resolutions, backend)
    # the launcher's environment right after resolution, inherited by its children
    monkeypatch.delenv(SELECTED_ENV, raising=False)
    if SELECTED_ENV in outcome.env_writes:
        monkeypatch.setenv(SELECTED_ENV, str(outcome.env_writes[SELECTED_ENV]))
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    process = context.Process(
        target=child.report, args=(pickle.dumps(outcome.record), queue)
    )
    process.start()
    try:
        data = queue.get(timeout=300)
    finally:
        process.join(timeout=60)
    assert "error" not in data, data["error"]
    chosen = backend == "aiter-ext"
    assert data["marker"] == ("aiter-ext" if chosen else None)
    assert data["env"] == ("1" if chosen else None)
    assert data["attention_backend"] == "aiter"
    assert data["selected"] is chosen
    assert data["selected_without_marker"] is chosen  # the environment fallback
    assert data["registry_wrapped"]
    assert data["draft_wrapped"]
    published = data["published"]
    if published is not None:  # 0.5.17+: what the scheduler's runtime reads after publish
        assert "error" not in published, published["error"]
        assert published["backends"] == ["aiter", "aiter"]
        if "mem_fraction_static" in published:
            assert published["mem_fraction_static"] == outcome.config()["mem_fraction_static"]
    if data["finished"] is not None:  # 0.5.19+: the child does not resolve again
        assert data["finished"] is True
