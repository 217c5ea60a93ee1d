"""register(): idempotent, switchable, and honest about what sglang's allow-lists decide."""

from __future__ import annotations

import pytest

from testkit.subproc import run_python

STATE = """
from sglang.srt.server_args import ATTENTION_BACKEND_CHOICES
from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
from sglang.srt.plugins.hook_registry import HookRegistry
from sglang_aiter_plugin._registration import last_statuses
def state():
    return {
        "choices": ATTENTION_BACKEND_CHOICES.count("aiter-ext"),
        "factory": "aiter-ext" in ATTENTION_BACKENDS,
        "hooks": {t: len(h) for t, h in HookRegistry._hooks.items()},
        "statuses": {s.name: s.state.value for s in (last_statuses() or [])},
    }
"""


def test_register_three_times_and_load_plugins_twice_leaves_one_of_each() -> None:
    code = STATE + """
from sglang.srt.plugins import load_plugins
import sglang_aiter_plugin
load_plugins(); load_plugins()
before = state()
sglang_aiter_plugin.register(); sglang_aiter_plugin.register(); sglang_aiter_plugin.register()
load_plugins()
HookRegistry.apply_hooks()
print("RESULT " + json.dumps({"before": before, "after": state()}))
"""
    data = run_python(code).data
    assert data["before"] == data["after"]
    assert data["after"]["choices"] == 1
    assert data["after"]["factory"] is True
    assert all(n == 1 for n in data["after"]["hooks"].values()), data["after"]["hooks"]


@pytest.mark.slow
def test_sglang_plugins_allow_list_without_this_plugin_loads_nothing() -> None:
    code = STATE + """
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.server_args import prepare_server_args
from testkit.doubles.rocm_platform import rocm_host
try:
    with rocm_host():  # 0.5.11-0.5.18 resolve while parsing: aiter-ext needs a ROCm host
        prepare_server_args(["--model-path", "dummy", "--attention-backend", "aiter-ext"])
    parsed = True
except SystemExit:
    parsed = False
print("RESULT " + json.dumps({"state": state(), "parsed": parsed}))
"""
    data = run_python(code, env={"SGLANG_PLUGINS": "some_other_plugin"}).data
    assert data["state"]["choices"] == 0
    assert data["state"]["statuses"] == {}
    assert data["parsed"] is False
    loaded = run_python(code, env={"SGLANG_PLUGINS": "some_other_plugin,aiter_ext"}).data
    assert loaded["state"]["choices"] == 1
    assert loaded["parsed"] is True


def test_disabled_plugin_loads_but_changes_nothing() -> None:
    code = STATE + """
from sglang.srt.plugins import load_plugins
load_plugins()
print("RESULT " + json.dumps(state()))
"""
    data = run_python(code, env={"SGLANG_AITER_EXT": "0"}).data
    assert data["choices"] == 0
    assert data["factory"] is False
    assert data["hooks"] == {}
    assert set(data["statuses"].values()) == {"disabled"}


def test_per_fix_disable_list_leaves_the_other_fixes() -> None:
    code = STATE + """
from sglang.srt.plugins import load_plugins
load_plugins()
print("RESULT " + json.dumps(state()))
"""
    data = run_python(code, env={"SGLANG_AITER_EXT_DISABLE": "capture-reduce-scatter"}).data
    assert data["statuses"]["capture-reduce-scatter"] == "disabled"
    assert data["statuses"]["attention-backend"] == "applied"
    assert data["choices"] == 1


def test_bad_switch_values_are_reported_and_sglang_still_loads() -> None:
    code = STATE + """
from sglang.srt.plugins import load_plugins
load_plugins()
print("RESULT " + json.dumps(state()))
"""
    result = run_python(
        code,
        env={
            "SGLANG_AITER_EXT": "maybe",
            "SGLANG_AITER_EXT_DISABLE": "no-such-fix",
            "SGLANG_AITER_EXT_BOUNDS_CHECK": "2",
        },
    )
    assert result.returncode == 0
    assert result.data["choices"] == 1  # invalid value keeps the default: enabled
    warnings = [ln for ln in result.stderr.splitlines() if "WARNING" in ln]
    assert len(warnings) == 3, warnings  # one line per problem
    assert "SGLANG_AITER_EXT='maybe' is not valid; accepted values: 1, true" in result.stderr
    assert "SGLANG_AITER_EXT_DISABLE names unknown fix 'no-such-fix'" in result.stderr
    assert "attention-backend" in result.stderr  # the accepted names are listed
    assert "SGLANG_AITER_EXT_BOUNDS_CHECK='2' is not valid" in result.stderr


def test_capture_all_reduce_in_the_disable_list_disables_that_fix_again() -> None:
    """``capture-all-reduce`` was retired once and is a fix again: listing it disables it."""
    code = STATE + """
from sglang.srt.plugins import load_plugins
load_plugins()
print("RESULT " + json.dumps(state()))
"""
    result = run_python(code, env={"SGLANG_AITER_EXT_DISABLE": "capture-all-reduce"})
    assert result.returncode == 0
    assert result.data["statuses"]["attention-backend"] == "applied"
    assert result.data["statuses"]["capture-all-reduce"] == "disabled"
    assert not [ln for ln in result.stderr.splitlines() if "WARNING" in ln]
    (line,) = [ln for ln in result.stderr.splitlines() if "sglang-aiter-plugin 0" in ln]
    assert "no longer a fix" not in line


RELOADED = STATE + """
import pathlib, tempfile
from sglang.srt.plugins import load_plugins
from sglang.srt.server_args import ServerArgs
import sglang_aiter_plugin
from sglang_aiter_plugin._patch import MARK
from sglang_aiter_plugin.fixes.attention_backend.choice import MARKER_ATTR, fold_point
from testkit.upstream_next import plugins_loaded_in_post_init
from tests.fixes.attention_backend.launches import COMMON, resolve_args, warm_up, write_models

models = write_models(pathlib.Path(tempfile.mkdtemp()))
warm_up(models)  # imports what resolution imports, on this CPU, before the simulated host
launch = {**COMMON, "model_path": models["llama-4k"], "attention_backend": "aiter-ext"}

def folds():
    fn, marks = getattr(ServerArgs, fold_point(ServerArgs)), []
    while fn is not None:
        marks.append(getattr(fn, MARK, None))
        fn = getattr(fn, "__wrapped__", None)
    return marks.count("fold")

def resolved(outcome):
    return dict(error=None if outcome.error is None else repr(outcome.error),
                backend=outcome.config()["attention_backend"] if outcome.error is None else None,
                marker=getattr(outcome.record, MARKER_ATTR, None))

with plugins_loaded_in_post_init():
    first = resolved(resolve_args(launch))  # the first ServerArgs of the process loads plugins
    after_first, modules = state(), set(sys.modules)
    for _ in range(3):  # what every spawned entry point does, here in one process
        load_plugins()
        sglang_aiter_plugin.register()
    imported = sorted(set(sys.modules) - modules)
    second = resolved(resolve_args(launch))
print("RESULT " + json.dumps(dict(first=first, second=second, before=after_first,
                                  after=state(), folds=folds(), point=fold_point(ServerArgs),
                                  imported=imported)))
"""


def test_plugins_loaded_during_resolution_and_in_every_process_change_nothing_twice() -> None:
    """sglang#38464 (``testkit.upstream_next.plugins_loaded_in_post_init``): sglang loads plugins
    in the first ``ServerArgs.__post_init__`` of a process and again in each spawned process's
    entry point; ``register()`` then runs several times in one process. The launch still
    resolves ``aiter-ext`` as ``aiter``, and the repeats change nothing: one start-up line, one
    fold, the same statuses."""
    result = run_python(RELOADED)
    assert result.returncode == 0, result.stderr[-3000:]
    data = result.data
    folded = {"error": None, "backend": "aiter", "marker": "aiter-ext"}
    assert data["second"] == folded
    if data["point"] == "resolve_once":  # 0.5.19+: __post_init__ runs before resolution
        assert data["first"] == folded
    else:  # 0.5.11-0.5.18 resolve inside __post_init__, which had begun when plugins loaded:
        # that record stays unfolded, and the model runner refuses it by name
        # (``UnfoldedSelectionError``, tests/fixes/attention_backend/test_factories.py)
        assert data["first"] == {"error": None, "backend": "aiter-ext", "marker": None}
    assert data["before"] == data["after"]
    assert data["after"]["choices"] == 1
    assert data["folds"] == 1
    assert data["imported"] == []  # a repeat imports nothing, probes nothing: it returns
    lines = [ln for ln in result.stderr.splitlines() if "sglang-aiter-plugin 0" in ln]
    assert len(lines) == 1, lines
