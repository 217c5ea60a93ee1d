"""`aiter-ext` through sglang's real argument parser and backend registry."""

from __future__ import annotations

import pytest

from sglang_aiter_plugin.backend import AiterUnavailableError
from sglang_aiter_plugin.fixes.attention_backend.choice import MARKER_ATTR

FLAGS = ["--attention-backend", "--prefill-attention-backend", "--decode-attention-backend"]


@pytest.mark.parametrize("flag", FLAGS)
def test_real_parser_accepts_aiter_ext(plugins_loaded: None, flag: str) -> None:
    from sglang.srt.server_args import prepare_server_args

    from sglang_aiter_plugin.fixes.attention_backend.choice import fold_point
    from testkit.doubles.rocm_platform import rocm_host

    with rocm_host():  # 0.5.11-0.5.18 resolve while parsing: aiter-ext needs a ROCm host
        args = prepare_server_args(["--model-path", "dummy", flag, "aiter-ext"])
    value = getattr(args, flag[2:].replace("-", "_"))
    if fold_point(type(args)) == "__post_init__":  # 0.5.11-0.5.18 resolve while parsing
        assert value == "aiter"
        assert getattr(args, MARKER_ATTR) == "aiter-ext"
    else:  # 0.5.19+ resolve later (resolve_once): the raw choice is kept until then
        assert value == "aiter-ext"
        assert not hasattr(args, MARKER_ATTR)


@pytest.mark.parametrize("flag", FLAGS)
def test_real_parser_still_rejects_unknown_names(
    plugins_loaded: None, flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from sglang.srt.server_args import prepare_server_args

    with pytest.raises(SystemExit) as exc:
        prepare_server_args(["--model-path", "dummy", flag, "aiter-extra"])
    assert exc.value.code == 2
    assert "invalid choice: 'aiter-extra'" in capsys.readouterr().err


def test_choice_is_added_once_in_the_shared_list(plugins_loaded: None) -> None:
    from sglang.srt import server_args

    from sglang_aiter_plugin._patch import patched
    from sglang_aiter_plugin.fixes.attention_backend.choice import PATCH, fold_point, install_fold

    install_fold(server_args, then=lambda selected: None)
    install_fold(server_args, then=lambda selected: None)
    assert server_args.ATTENTION_BACKEND_CHOICES.count("aiter-ext") == 1
    cls = server_args.ServerArgs
    assert patched(getattr(cls, fold_point(cls)), PATCH)


def test_building_aiter_ext_without_rocm_names_rocm_and_aiter(construction_sites: None) -> None:
    from sglang_aiter_plugin.backend import aiter_problem

    if aiter_problem() is None:
        pytest.skip("aiter runs on this host: there is no missing-ROCm message to show")
    from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS

    from testkit.doubles.bare_model_runner import BareModelRunnerDouble

    record = type("Record", (), {MARKER_ATTR: "aiter-ext"})()
    with pytest.raises(AiterUnavailableError) as exc:  # the folded path: aiter's factory
        ATTENTION_BACKENDS["aiter"](BareModelRunnerDouble(record))
    message = str(exc.value)
    assert "aiter-ext cannot run here" in message
    assert "ROCm" in message
    assert "--attention-backend triton" in message
