"""sglang's aiter construction sites build the plugin's classes for aiter-ext, stock for aiter.

Everything is real: sglang's registry entry, its draft factory methods, its backend constructors
(the per-step children looked up through a module-global name) and the plugin's own constructors,
on a model-runner double configured through sglang's argument parsing.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from sglang_aiter_plugin.backend import AiterUnavailableError
from sglang_aiter_plugin.fixes.attention_backend.choice import MARKER_ATTR, SELECTED_ENV
from testkit.sglang_setup import Setup

AITER = "sglang.srt.layers.attention.aiter_backend"


def backend_classes() -> tuple[type[Any], type[Any]]:
    from sglang_aiter_plugin.backend.classes import (
        AiterExtAttnBackend,
        AiterExtMultiStepDraftBackend,
    )

    return AiterExtAttnBackend, AiterExtMultiStepDraftBackend


@pytest.fixture
def stock_classes(construction_sites: None) -> tuple[type[Any], type[Any]]:
    module: Any = importlib.import_module(AITER)
    return module.AiterAttnBackend, module.AiterMultiStepDraftBackend


@pytest.fixture
def runner(
    monkeypatch: pytest.MonkeyPatch, plugins_loaded: None, sglang_setup: Setup
) -> Any:
    """A configured model runner; aiter "available"; no choice in the environment."""
    import sglang_aiter_plugin.backend as _availability

    monkeypatch.setattr(_availability, "require_aiter", lambda: None)
    monkeypatch.delenv(SELECTED_ENV, raising=False)
    return sglang_setup.runner


def _choose(monkeypatch: pytest.MonkeyPatch, runner: Any, choice: str | None) -> Any:
    if choice is None:
        monkeypatch.delattr(runner.server_args, MARKER_ATTR, raising=False)
    else:
        monkeypatch.setattr(runner.server_args, MARKER_ATTR, choice, raising=False)
    return runner


def _registry_build(runner: Any) -> Any:
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    return ATTENTION_BACKENDS["aiter"](runner)


def _draft_factory(runner: Any, steps: int = 3) -> Any:
    from sglang.srt.speculative.draft_utils import DraftBackendFactory

    factory = object.__new__(DraftBackendFactory)  # its __init__ reads a real draft worker
    factory.draft_model_runner = runner
    factory.topk = 1
    factory.speculative_num_steps = steps
    return factory


def _unstamped(result: Any) -> Any:
    """0.5.2x returns ``(stamp, backend)``; earlier releases return the backend."""
    if isinstance(result, tuple):
        stamp, backend = result
        assert stamp == "aiter"  # model code reads the stamp back: it must stay "aiter"
        return backend
    return result


def test_registry_builds_stock_for_aiter(
    monkeypatch: pytest.MonkeyPatch, runner: Any, stock_classes: tuple[type[Any], type[Any]]
) -> None:
    assert type(_registry_build(_choose(monkeypatch, runner, "aiter"))) is stock_classes[0]
    assert type(_registry_build(_choose(monkeypatch, runner, None))) is stock_classes[0]


def test_registry_builds_the_plugin_class_for_aiter_ext(
    monkeypatch: pytest.MonkeyPatch, runner: Any, stock_classes: tuple[type[Any], type[Any]]
) -> None:
    backend = _registry_build(_choose(monkeypatch, runner, "aiter-ext"))
    assert type(backend) is backend_classes()[0]
    assert isinstance(backend, stock_classes[0])
    assert backend.buffer_pool.owner is backend  # the plugin's own constructor ran


def test_draft_prefill_follows_the_choice(
    monkeypatch: pytest.MonkeyPatch, runner: Any, stock_classes: tuple[type[Any], type[Any]]
) -> None:
    stock = _unstamped(_draft_factory(_choose(monkeypatch, runner, "aiter"))
                       ._create_aiter_prefill_backend())
    ext = _unstamped(_draft_factory(_choose(monkeypatch, runner, "aiter-ext"))
                     ._create_aiter_prefill_backend())
    assert type(stock) is stock_classes[0]
    assert type(ext) is backend_classes()[0]
    assert ext.skip_prefill == stock.skip_prefill  # sglang's own arguments, unchanged


def test_draft_multi_step_and_its_children_follow_the_choice(
    monkeypatch: pytest.MonkeyPatch, runner: Any, stock_classes: tuple[type[Any], type[Any]]
) -> None:
    attn_stock, multi_stock = stock_classes
    attn_ext, multi_ext = backend_classes()
    stock = _unstamped(_draft_factory(_choose(monkeypatch, runner, "aiter"), steps=4)
                       ._create_aiter_decode_backend())
    ext = _unstamped(_draft_factory(_choose(monkeypatch, runner, "aiter-ext"), steps=4)
                     ._create_aiter_decode_backend())
    assert type(stock) is multi_stock
    assert [type(c) for c in stock.attn_backends] == [attn_stock] * 3
    assert type(ext) is multi_ext
    assert [type(c) for c in ext.attn_backends] == [attn_ext] * 3
    # eagle_worker_v2 enables the draft-extend graph on isinstance(AiterMultiStepDraftBackend)
    assert isinstance(ext, multi_stock)


def test_building_the_plugin_classes_changes_no_module_name(
    monkeypatch: pytest.MonkeyPatch, runner: Any, stock_classes: tuple[type[Any], type[Any]]
) -> None:
    module: Any = importlib.import_module(AITER)
    seen: list[tuple[Any, Any]] = []
    original = module.AiterAttnBackend.__init__

    def spy(self: Any, *args: Any, **kwargs: Any) -> None:  # runs during the build
        seen.append((module.AiterAttnBackend, module.AiterMultiStepDraftBackend))
        original(self, *args, **kwargs)

    monkeypatch.setattr(module.AiterAttnBackend, "__init__", spy)
    _draft_factory(_choose(monkeypatch, runner, "aiter-ext"))._create_aiter_decode_backend()
    assert seen  # the children were built through sglang's constructor
    assert set(seen) == {stock_classes}  # never swapped, not even during the build


def test_environment_decides_when_the_record_has_no_marker(
    monkeypatch: pytest.MonkeyPatch, runner: Any
) -> None:
    monkeypatch.setenv(SELECTED_ENV, "1")
    assert type(_registry_build(_choose(monkeypatch, runner, None))) is backend_classes()[0]
    built = _registry_build(_choose(monkeypatch, runner, "aiter"))
    assert type(built).__name__ == "AiterAttnBackend"  # the record wins


def test_aiter_ext_without_rocm_fails_at_build_with_the_rocm_message(
    monkeypatch: pytest.MonkeyPatch, plugins_loaded: None, sglang_setup: Setup,
    stock_classes: tuple[type[Any], type[Any]],
) -> None:
    runner = sglang_setup.runner
    with pytest.raises(AiterUnavailableError) as exc:
        _registry_build(_choose(monkeypatch, runner, "aiter-ext"))
    message = str(exc.value)
    assert "aiter-ext cannot run here" in message
    assert "ROCm" in message
    stock = _registry_build(_choose(monkeypatch, runner, "aiter"))
    assert type(stock) is stock_classes[0]  # stock aiter is not gated


def test_an_unfolded_aiter_ext_entry_fails_fast(
    monkeypatch: pytest.MonkeyPatch, runner: Any
) -> None:
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    from sglang_aiter_plugin.fixes.attention_backend.sites import UnfoldedSelectionError

    with pytest.raises(UnfoldedSelectionError, match="without being resolved as 'aiter'"):
        ATTENTION_BACKENDS["aiter-ext"](_choose(monkeypatch, runner, "aiter-ext"))


def test_stock_factories_are_wrapped_not_replaced(construction_sites: None) -> None:
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
    from sglang.srt.speculative.draft_utils import DraftBackendFactory

    assert ATTENTION_BACKENDS["aiter"].__wrapped__.__module__ == (
        "sglang.srt.layers.attention.attention_registry"
    )
    for name in ("_create_aiter_prefill_backend", "_create_aiter_decode_backend"):
        wrapped = getattr(DraftBackendFactory, name).__wrapped__
        assert wrapped.__module__ == "sglang.srt.speculative.draft_utils"
