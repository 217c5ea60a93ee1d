"""What sglang publishes, and its runtime name-based helpers, agree between aiter and aiter-ext.

``/server_info`` is the resolved configuration (``resolved_dict()`` from 0.5.19, the dataclass
fields before), compared in full by the resolution matrix. Here: the backend names the runtime
reads out of it, fed to every name-based helper the installed release has, and what the user
sees of the fold (raw input, the plugin's log line).
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

import pytest

from tests.fixes.attention_backend.launches import Resolutions

MLA_LAUNCHES = ["deepseek-v3", "deepseek-v3-split", "deepseek-v3-mtp"]


def _runtime_names(config: dict[str, Any]) -> tuple[str, str]:
    """(prefill, decode) as the model runner reads them: split fields fall back to the base."""
    base = config["attention_backend"]
    return (
        config.get("prefill_attention_backend") or base,
        config.get("decode_attention_backend") or base,
    )


def _helper(module: str, name: str) -> Any:
    try:
        found = getattr(importlib.import_module(module), name, None)
    except ImportError as exc:  # pragma: no cover - depends on the release
        pytest.skip(f"{module} does not import here: {exc}")
    if found is None:
        pytest.skip(f"sglang has no {module}.{name} in this release")
    return found


def _pair(resolutions: Resolutions, launch: str) -> tuple[dict[str, Any], dict[str, Any]]:
    stock = resolutions.get(launch, "aiter")
    ext = resolutions.get(launch, "aiter-ext")
    assert stock.error is None, stock.error
    assert ext.error is None, ext.error
    return stock.config(), ext.config()


@pytest.mark.parametrize("launch", MLA_LAUNCHES)
def test_runtime_sees_the_aiter_names(resolutions: Resolutions, launch: str) -> None:
    stock, ext = _pair(resolutions, launch)
    assert _runtime_names(ext) == _runtime_names(stock) == ("aiter", "aiter")


@pytest.mark.parametrize("launch", MLA_LAUNCHES)
def test_deepseek_handler_registry_picks_the_aiter_handler(
    resolutions: Resolutions, launch: str
) -> None:
    registry = _helper(
        "sglang.srt.models.deepseek_common.attention_backend_handler", "AttentionBackendRegistry"
    )
    stock, ext = _pair(resolutions, launch)
    for stock_name, ext_name in zip(_runtime_names(stock), _runtime_names(ext), strict=True):
        handler = registry.get_handler(ext_name)
        assert handler is registry.get_handler(stock_name)
        assert handler is not registry.get_handler("triton")  # no silent triton fallback


@pytest.mark.parametrize("launch", MLA_LAUNCHES)
def test_mla_dcp_lse_base_matches(resolutions: Resolutions, launch: str) -> None:
    base_on_e = _helper(
        "sglang.srt.models.deepseek_common.attention_forward_methods.forward_mla",
        "is_mla_dcp_lse_base_on_e",
    )
    stock, ext = _pair(resolutions, launch)
    # 0.5.20+ answer True for aiter (base e), 0.5.19 False; aiter-ext must answer the same
    assert base_on_e(_runtime_names(ext)[1]) is base_on_e(_runtime_names(stock)[1])
    assert base_on_e(_runtime_names(ext)[1]) is base_on_e("aiter")


@pytest.mark.parametrize("launch", MLA_LAUNCHES)
def test_may_run_mla_decode_kernel_matches(resolutions: Resolutions, launch: str) -> None:
    backend_cls = _helper("sglang.srt.layers.attention.aiter_backend", "AiterAttnBackend")
    may_run = getattr(backend_cls, "may_run_mla_decode_kernel", None)
    if may_run is None:
        pytest.skip("AiterAttnBackend.may_run_mla_decode_kernel appeared in sglang 0.5.19")
    stock, ext = _pair(resolutions, launch)
    answers = [
        may_run(
            None,
            decode_attention_backend=_runtime_names(config)[1],
            speculative_algorithm=config["speculative_algorithm"],
            speculative_attention_mode=config.get("speculative_attention_mode") or "decode",
        )
        for config in (stock, ext)
    ]
    assert answers == [True, True]


@pytest.mark.parametrize("launch", ["gpt-oss", "deepseek-v3-split"])
def test_attention_backends_of_matches(resolutions: Resolutions, launch: str) -> None:
    found = _first("attention_backends_of")
    if found is None:
        pytest.skip("sglang has no attention_backends_of in this release")
    stock = resolutions.get(launch, "aiter").record
    ext = resolutions.get(launch, "aiter-ext").record
    view = _resolved_view()
    assert found(view(ext)) == found(view(stock)) == ("aiter", "aiter")


def _first(name: str) -> Any:
    """``name`` from the module that holds it in this release (it moved in 0.5.19)."""
    for module in ("sglang.srt.arg_groups.model_override_base", "sglang.srt.arg_groups.overrides"):
        try:
            found = getattr(importlib.import_module(module), name, None)
        except ImportError:
            continue
        if found is not None:
            return found
    return None


def _resolved_view() -> Any:
    return _first("resolved_view") or (lambda record: record)


def test_the_users_choice_stays_visible(resolutions: Resolutions) -> None:
    ext = resolutions.get("llama-32k", "aiter-ext")
    assert ext.config()["attention_backend"] == "aiter"
    raw = getattr(ext.record, "_raw_input", None)
    if raw is not None:  # 0.5.19+: the raw input (and so launch_command) keeps what was typed
        assert raw["attention_backend"] == "aiter-ext"


def test_the_fold_is_logged(
    resolutions: Resolutions, caplog: pytest.LogCaptureFixture
) -> None:
    from tests.fixes.attention_backend.launches import LAUNCHES, resolve

    logger = logging.getLogger("sglang_aiter_plugin")
    logger.addHandler(caplog.handler)
    try:
        with caplog.at_level(logging.INFO, logger="sglang_aiter_plugin"):
            launch = next(launch for launch in LAUNCHES if launch.name == "deepseek-v3-split")
            resolve(launch, resolutions.models, "aiter-ext")
    finally:
        logger.removeHandler(caplog.handler)
    lines = sorted({r.getMessage() for r in caplog.records if "resolving" in r.getMessage()})
    assert len(lines) == 1
    assert "decode_attention_backend, prefill_attention_backend 'aiter-ext' as 'aiter'" in lines[0]


def test_doctor_describes_this_release(resolutions: Resolutions) -> None:
    from sglang_aiter_plugin import _doctor

    report = _doctor.Report()
    _doctor._naming(report)
    (note,) = [c.summary for c in report.checks if c.name == "naming"]
    record = resolutions.get("llama-32k", "aiter-ext").record
    raw = getattr(record, "_raw_input", None)
    if "launch_command" in note:
        assert raw is not None
        assert raw["attention_backend"] == "aiter-ext"
    else:
        assert raw is None
        assert record.attention_backend == "aiter"
