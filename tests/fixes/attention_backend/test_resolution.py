"""The same launch resolved with ``aiter`` and with ``aiter-ext`` gives the same server.

Every launch runs sglang's real resolution on a simulated MI300X: the long-context memory
fraction (with and without an explicit fraction, honoured or not), GPT-OSS / Llama-4 / Gemma-4
validation, DeepSeek-V3 MLA with the single and the split flags, EAGLE, MTP, deterministic
inference (which rejects aiter) and the dummy model. Where ``aiter`` raises, ``aiter-ext``
raises the same exception with the same message.
"""

from __future__ import annotations

import pytest

from sglang_aiter_plugin.fixes.attention_backend.choice import MARKER_ATTR, SELECTED_ENV
from tests.fixes.attention_backend.launches import LAUNCHES, Resolutions

NAMES = [launch.name for launch in LAUNCHES]


@pytest.mark.parametrize("name", NAMES)
def test_aiter_ext_resolves_exactly_like_aiter(resolutions: Resolutions, name: str) -> None:
    stock = resolutions.get(name, "aiter")
    ext = resolutions.get(name, "aiter-ext")
    assert ext.error_signature() == stock.error_signature()
    if stock.error is not None:
        return
    assert ext.config() == stock.config()
    assert ext.sources() == stock.sources()
    ext_env = {k: v for k, v in ext.env_writes.items() if k != SELECTED_ENV}
    assert ext_env == stock.env_writes
    assert getattr(ext.record, MARKER_ATTR) == "aiter-ext"
    assert ext.env_writes[SELECTED_ENV] == "1"


@pytest.mark.parametrize("name", NAMES)
def test_a_launch_without_aiter_ext_is_left_exactly_as_upstream(
    resolutions: Resolutions, name: str
) -> None:
    """No marker on the record, nothing written into the environment, for aiter and triton."""
    for backend in ("aiter", "triton"):
        outcome = resolutions.get(name, backend)
        assert not hasattr(outcome.record, MARKER_ATTR), backend
        assert SELECTED_ENV not in outcome.env_writes, backend


def test_the_matrix_covers_accepted_and_rejected_launches(resolutions: Resolutions) -> None:
    """Equality means something only if launches both pass and fail resolution with aiter."""
    outcomes = {name: resolutions.get(name, "aiter") for name in NAMES}
    assert outcomes["llama-32k"].error is None
    assert outcomes["deepseek-v3-mtp"].error is None
    assert isinstance(outcomes["llama-deterministic"].error, ValueError)
    assert "'aiter'" in str(outcomes["llama-deterministic"].error)


def test_the_simulated_host_reaches_the_aiter_memory_decision(resolutions: Resolutions) -> None:
    """On this host aiter's long-context memory rule fires, so the comparison is not vacuous."""
    aiter = resolutions.get("llama-32k", "aiter").config()["mem_fraction_static"]
    triton = resolutions.get("llama-32k", "triton").config()["mem_fraction_static"]
    short = resolutions.get("llama-4k", "aiter").config()["mem_fraction_static"]
    assert aiter < triton
    assert short == resolutions.get("llama-4k", "triton").config()["mem_fraction_static"]


def test_without_the_fold_aiter_ext_would_diverge(
    resolutions: Resolutions, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Negative control: bypass the fold and the same launch resolves differently."""
    from sglang.srt.server_args import ServerArgs

    from sglang_aiter_plugin.fixes.attention_backend.choice import fold_point
    from tests.fixes.attention_backend.launches import resolve

    point = fold_point(ServerArgs)
    monkeypatch.setattr(ServerArgs, point, getattr(ServerArgs, point).__wrapped__)
    launch = next(launch for launch in LAUNCHES if launch.name == "llama-32k")
    unfolded = resolve(launch, resolutions.models, "aiter-ext")
    stock = resolutions.get("llama-32k", "aiter")
    assert unfolded.error is None
    assert unfolded.config()["mem_fraction_static"] != stock.config()["mem_fraction_static"]
