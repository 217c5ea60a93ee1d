"""sglang's aiter construction sites build the plugin's classes for aiter-ext, stock for aiter.

The backend constructors themselves need aiter's kernels, so their ``__init__`` is the double
from ``tests/doubles/aiter_constructors.py``; everything around them -- the registry entry, the
draft factory methods, the module-global lookup of the per-step children -- is sglang's own.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest

from sglang_aiter_plugin.backend import AiterUnavailableError, backend_classes
from sglang_aiter_plugin.selection import MARKER_ATTR, SELECTED_ENV
from tests.doubles import aiter_constructors
from tests.doubles.bare_model_runner import BareModelRunnerDouble

AITER = "sglang.srt.layers.attention.aiter_backend"


class Record:
    """A resolved record as far as the factories look at it: the marker, or nothing."""

    def __init__(self, choice: str | None) -> None:
        if choice is not None:
            setattr(self, MARKER_ATTR, choice)


@pytest.fixture
def stock_classes(plugins_loaded: None) -> tuple[type[Any], type[Any]]:
    module: Any = importlib.import_module(AITER)
    return module.AiterAttnBackend, module.AiterMultiStepDraftBackend


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch, stock_classes: tuple[type[Any], type[Any]]) -> None:
    """Constructors replaced by the double; aiter "available"; no choice in the environment."""
    from sglang_aiter_plugin.backend import _availability

    aiter_constructors.install(monkeypatch)
    monkeypatch.setattr(_availability, "require_aiter", lambda: None)
    monkeypatch.delenv(SELECTED_ENV, raising=False)


def _registry_build(choice: str | None) -> Any:
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    return ATTENTION_BACKENDS["aiter"](BareModelRunnerDouble(Record(choice)))


def _draft_factory(choice: str | None, steps: int = 3) -> Any:
    from sglang.srt.speculative.draft_utils import DraftBackendFactory

    factory = object.__new__(DraftBackendFactory)  # its __init__ reads a real draft runner
    factory.draft_model_runner = BareModelRunnerDouble(Record(choice))
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


@pytest.mark.usefixtures("built")
def test_registry_builds_stock_for_aiter(stock_classes: tuple[type[Any], type[Any]]) -> None:
    assert type(_registry_build("aiter")) is stock_classes[0]
    assert type(_registry_build(None)) is stock_classes[0]


@pytest.mark.usefixtures("built")
def test_registry_builds_the_plugin_class_for_aiter_ext(
    stock_classes: tuple[type[Any], type[Any]],
) -> None:
    backend = _registry_build("aiter-ext")
    assert type(backend) is backend_classes()[0]
    assert isinstance(backend, stock_classes[0])


@pytest.mark.usefixtures("built")
def test_draft_prefill_follows_the_choice(stock_classes: tuple[type[Any], type[Any]]) -> None:
    stock = _unstamped(_draft_factory("aiter")._create_aiter_prefill_backend())
    ext = _unstamped(_draft_factory("aiter-ext")._create_aiter_prefill_backend())
    assert type(stock) is stock_classes[0]
    assert type(ext) is backend_classes()[0]
    assert ext.double_args[2] == stock.double_args[2]  # sglang's own arguments, unchanged


@pytest.mark.usefixtures("built")
def test_draft_multi_step_and_its_children_follow_the_choice(
    stock_classes: tuple[type[Any], type[Any]],
) -> None:
    attn_stock, multi_stock = stock_classes
    attn_ext, multi_ext = backend_classes()
    stock = _unstamped(_draft_factory("aiter", steps=4)._create_aiter_decode_backend())
    ext = _unstamped(_draft_factory("aiter-ext", steps=4)._create_aiter_decode_backend())
    assert type(stock) is multi_stock
    assert [type(c) for c in stock.attn_backends] == [attn_stock] * 3
    assert type(ext) is multi_ext
    assert [type(c) for c in ext.attn_backends] == [attn_ext] * 3
    # eagle_worker_v2 enables the draft-extend graph on isinstance(AiterMultiStepDraftBackend)
    assert isinstance(ext, multi_stock)


@pytest.mark.usefixtures("built")
def test_module_names_are_restored_after_a_build(
    stock_classes: tuple[type[Any], type[Any]],
) -> None:
    _unstamped(_draft_factory("aiter-ext")._create_aiter_decode_backend())
    module: Any = importlib.import_module(AITER)
    assert (module.AiterAttnBackend, module.AiterMultiStepDraftBackend) == stock_classes


@pytest.mark.usefixtures("built")
def test_environment_decides_when_the_record_has_no_marker(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(SELECTED_ENV, "1")
    assert type(_registry_build(None)) is backend_classes()[0]
    assert type(_registry_build("aiter")).__name__ == "AiterAttnBackend"  # the record wins


def test_aiter_ext_without_rocm_fails_at_build_with_the_rocm_message(
    monkeypatch: pytest.MonkeyPatch, stock_classes: tuple[type[Any], type[Any]]
) -> None:
    aiter_constructors.install(monkeypatch)
    with pytest.raises(AiterUnavailableError) as exc:
        _registry_build("aiter-ext")
    message = str(exc.value)
    assert "aiter-ext cannot run here" in message and "ROCm" in message
    assert type(_registry_build("aiter")) is stock_classes[0]  # stock aiter is not gated


@pytest.mark.usefixtures("built")
def test_an_unfolded_aiter_ext_entry_fails_fast() -> None:
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    from sglang_aiter_plugin.selection.factories import UnfoldedSelectionError

    with pytest.raises(UnfoldedSelectionError, match="without being resolved as 'aiter'"):
        ATTENTION_BACKENDS["aiter-ext"](BareModelRunnerDouble(Record("aiter-ext")))


def test_stock_factories_are_wrapped_not_replaced(plugins_loaded: None) -> None:
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
    from sglang.srt.speculative.draft_utils import DraftBackendFactory

    assert ATTENTION_BACKENDS["aiter"].__wrapped__.__module__ == (
        "sglang.srt.layers.attention.attention_registry"
    )
    for name in ("_create_aiter_prefill_backend", "_create_aiter_decode_backend"):
        wrapped = getattr(DraftBackendFactory, name).__wrapped__
        assert wrapped.__module__ == "sglang.srt.speculative.draft_utils"
