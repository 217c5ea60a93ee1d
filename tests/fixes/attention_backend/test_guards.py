"""Launches the plugin cannot make behave like aiter are stopped with a message naming the way out;
the lists sglang keeps aiter out of stay without aiter-ext."""

from __future__ import annotations

import importlib
import sys

import pytest

from sglang_aiter_plugin.fixes.attention_backend.choice import BackendChoiceError
from tests.fixes.attention_backend.launches import COMMON, resolve_args


def _error(models: dict[str, str], **kwargs: object) -> BaseException | None:
    return resolve_args({**COMMON, "model_path": models["llama-4k"], **kwargs}).error


@pytest.mark.parametrize(
    "kwargs",
    [
        {"attention_backend": "aiter-ext", "decode_attention_backend": "aiter"},
        {"prefill_attention_backend": "aiter", "decode_attention_backend": "aiter-ext"},
        {"attention_backend": "aiter", "speculative_draft_attention_backend": "aiter-ext"},
    ],
)
def test_mixing_aiter_and_aiter_ext_is_rejected(
    models: dict[str, str], kwargs: dict[str, str]
) -> None:
    error = _error(models, **kwargs)
    assert isinstance(error, BackendChoiceError)
    message = str(error)
    assert "mix 'aiter-ext'" in message
    assert "Choose 'aiter-ext' for all of them" in message


def test_aiter_ext_with_a_non_aiter_half_is_accepted(models: dict[str, str]) -> None:
    assert not isinstance(
        _error(models, prefill_attention_backend="triton", decode_attention_backend="aiter-ext"),
        BackendChoiceError,
    )


def test_aiter_ext_with_ray_is_rejected(models: dict[str, str]) -> None:
    error = _error(models, attention_backend="aiter-ext", use_ray=True)
    assert isinstance(error, BackendChoiceError)
    assert "--use-ray" in str(error)
    assert "never load plugins" in str(error)


def test_aiter_with_ray_is_left_to_sglang(models: dict[str, str]) -> None:
    error = _error(models, attention_backend="aiter", use_ray=True)
    assert not isinstance(error, BackendChoiceError)


LISTS_WITHOUT_AITER = (
    "CHUNKED_PREFIX_CACHE_SUPPORTED_ATTENTION_BACKENDS",
    "DRAFT_ATTENTION_BACKEND_CHOICES",
    "DETERMINISTIC_ATTENTION_BACKEND_CHOICES",
)
HOMES = (
    "sglang.srt.arg_groups.choices",
    "sglang.srt.server_args",
    "sglang.srt.model_executor.model_runner",
)


@pytest.mark.parametrize("name", LISTS_WITHOUT_AITER)
def test_lists_aiter_is_absent_from_stay_without_aiter_ext(
    plugins_loaded: None, name: str
) -> None:
    found = []
    for home in HOMES:
        try:
            module = importlib.import_module(home)
        except ImportError:
            continue
        if hasattr(module, name):
            found.append(getattr(module, name))
    if not found:
        pytest.skip(f"sglang has no {name} in this release")
    for values in found:
        assert "aiter" not in values
        assert "aiter-ext" not in values


def test_aiter_ext_is_only_in_the_cli_choices_and_the_registry(construction_sites: None) -> None:
    """No other module-level collection of sglang's learned the new name, once a launch chose
    aiter-ext (the modules a launch imports, imported here: run alone, nothing else has)."""
    importlib.import_module("sglang.srt.server_args")
    importlib.import_module("sglang.srt.layers.attention.attention_registry")
    importlib.import_module("sglang.srt.speculative.draft_utils")
    holders = set()
    for module in list(sys.modules.values()):
        name = getattr(module, "__name__", "")
        if not name.startswith("sglang."):
            continue
        for attr, value in list(vars(module).items()):
            if isinstance(value, (list, tuple, set, frozenset, dict)):
                try:
                    if "aiter-ext" in value:
                        holders.add(attr)
                except TypeError:
                    continue
    assert holders == {"ATTENTION_BACKEND_CHOICES", "ATTENTION_BACKENDS"}
