"""The plugin never takes sglang down: broken fixes, platform switches, re-entrancy."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from testkit.distributions import write_distribution
from testkit.subproc import run_main_script, run_python

#: Before sglang's loader runs: the all-gather fix raises in its probe (a fix object's hook is
#: looked up on the object, so an attribute set on it replaces it).
BREAK_A_FIX = """
from sglang_aiter_plugin.fixes import collectives
from sglang_aiter_plugin.plugin.spec import hookimpl

@hookimpl
def aiter_ext_apply_fix(context):
    raise ValueError("probe found a flux capacitor")

collectives.ALL_GATHER.aiter_ext_apply_fix = aiter_ext_apply_fix
"""


@pytest.mark.slow
def test_a_raising_fix_leaves_sglang_and_the_other_fixes_working() -> None:
    code = BREAK_A_FIX + """
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.server_args import prepare_server_args
from testkit.doubles.rocm_platform import rocm_host
with rocm_host():  # 0.5.11-0.5.18 resolve while parsing: aiter-ext needs a ROCm host
    args = prepare_server_args(["--model-path", "dummy", "--attention-backend", "aiter-ext"])
import sglang.srt.layers.attention.attention_registry, sglang.srt.speculative.draft_utils
from sglang_aiter_plugin._registration import last_statuses
print("RESULT " + json.dumps({s.name: [s.state.value, s.detail] for s in last_statuses()}))
"""
    result = run_python(code)
    assert result.returncode == 0, result.stderr[-3000:]
    statuses = result.data
    assert statuses["capture-all-gather"] == ["failed", "ValueError: probe found a flux capacitor"]
    assert statuses["attention-backend"][0] == "applied"
    assert statuses["capture-reduce-scatter"][0] == "skipped"  # off ROCm, as without the fault
    assert ("fix capture-all-gather failed: ValueError: probe found a flux capacitor"
            in result.stderr)


@pytest.mark.slow
def test_doctor_shows_the_failed_fix_and_exits_non_zero() -> None:
    code = BREAK_A_FIX + """
from sglang_aiter_plugin.cli import main
sys.exit(main(["doctor", "--json"]))
"""
    proc = run_python(code)
    assert proc.returncode == 1
    checks = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert checks["fix capture-all-gather"]["level"] == "FAIL"
    assert "probe found a flux capacitor" in checks["fix capture-all-gather"]["summary"]
    assert checks["fix attention-backend"]["level"] == "ok"


def _pythonpath(extra: Path) -> str:
    current = os.environ.get("PYTHONPATH")
    return f"{current}:{extra}" if current else str(extra)


@pytest.fixture
def platform_dists(tmp_path: Path) -> Path:
    """Two out-of-tree platform distributions; the second also ships a general plugin."""
    # activate() names the base platform class: a real, if featureless, platform
    source = "def f():\n    return 'sglang.srt.platforms.interface.SRTPlatform'\n"
    for name in ("plat_a", "plat_b"):
        eps: dict[str, dict[str, str]] = {"sglang.srt.platforms": {name: f"{name}:f"}}
        if name == "plat_b":
            eps["sglang.srt.plugins"] = {"b_general": "plat_b:f"}
        write_distribution(tmp_path, name, modules={name: source}, entry_points=eps)
    return tmp_path


@pytest.mark.slow
def test_sglang_platform_selection_excludes_other_platforms_but_never_this_plugin(
    platform_dists: Path,
) -> None:
    code = """
from sglang.srt import plugins
excluded = plugins._get_excluded_dists()
loaded = plugins.load_plugins_by_group(plugins.GENERAL_PLUGINS_GROUP, excluded_dists=excluded)
print("RESULT " + json.dumps({"excluded": sorted(excluded), "loaded": sorted(loaded)}))
"""
    env = {"PYTHONPATH": _pythonpath(platform_dists), "SGLANG_PLATFORM": "plat_a"}
    data = run_python(code, env=env).data
    assert data["excluded"] == ["plat_b"]  # sglang's exclusion works here ...
    assert "b_general" not in data["loaded"]
    assert "aiter_ext" in data["loaded"]  # ... and never hits a plugin without a platform


REENTRANT = """
import multiprocessing as mp

def layers():
    from sglang.srt.distributed.parallel_state import GroupCoordinator
    fn = GroupCoordinator.__dict__.get("fused_allreduce_rmsnorm")
    n = 0
    while fn is not None and hasattr(fn, "__wrapped__"):
        n += 1
        fn = fn.__wrapped__
    return n

def state():
    from sglang.srt.server_args import ATTENTION_BACKEND_CHOICES
    from sglang_aiter_plugin._registration import last_statuses
    rs = {s.name: s.state.value for s in last_statuses()}["capture-fused-ar-rmsnorm"]
    return {"layers": layers(), "choices": ATTENTION_BACKEND_CHOICES.count("aiter-ext"), "rs": rs}

ROCM = []

def as_on_rocm():  # the collective fixes install only there
    from testkit.doubles.rocm_platform import simulated_rocm
    ROCM.append(simulated_rocm())  # kept: the block ends when the manager is collected
    ROCM[-1].__enter__()
    import sglang.srt.distributed.parallel_state

def child(q):
    import sys
    sys.modules.setdefault("aiter", None)
    as_on_rocm()
    from sglang.srt.plugins import load_plugins
    load_plugins()
    import sglang_aiter_plugin
    sglang_aiter_plugin.register()
    load_plugins()
    q.put(state())

if __name__ == "__main__":
    as_on_rocm()
    from sglang.srt.plugins import HookRegistry, load_plugins
    load_plugins()
    import sglang_aiter_plugin
    sglang_aiter_plugin.register(); sglang_aiter_plugin.register()
    HookRegistry.apply_hooks()
    parent = state()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    got = q.get(timeout=600)
    p.join()
    print("RESULT " + json.dumps({"parent": parent, "child": got}))
"""


@pytest.mark.slow
def test_reentrant_loading_never_double_wraps(tmp_path: Path) -> None:
    result = run_main_script(tmp_path, REENTRANT)
    assert result.returncode == 0, result.stderr[-3000:]
    for side in ("parent", "child"):
        got = result.data[side]
        assert got["choices"] == 1
        assert got["rs"] == "applied"
        assert got["layers"] == 1, got


@pytest.mark.parametrize("value", ["yes", "2", "true", " 1"])
def test_garbage_in_the_recorded_choice_is_a_clear_error(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglang_aiter_plugin.fixes.attention_backend.choice import (
        SELECTED_ENV,
        SelectionError,
        is_selected,
    )

    monkeypatch.setenv(SELECTED_ENV, value)
    with pytest.raises(SelectionError) as exc:
        is_selected(None)  # a record without the marker falls back to the environment
    assert f"{SELECTED_ENV}={value!r} is not valid; accepted values: 0, 1" in str(exc.value)
    assert "unset it" in str(exc.value)


@pytest.mark.parametrize(("value", "selected"), [("1", True), ("0", False), (None, False)])
def test_the_recorded_choice_reads_back(
    value: str | None, selected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglang_aiter_plugin.fixes.attention_backend.choice import SELECTED_ENV, is_selected

    if value is None:
        monkeypatch.delenv(SELECTED_ENV, raising=False)
    else:
        monkeypatch.setenv(SELECTED_ENV, value)
    assert is_selected(None) is selected


FLAG_TYPED = """
from sglang.srt.plugins import load_plugins
load_plugins()
from sglang.srt.server_args import prepare_server_args
errors = []
for flag in ("--speculative-draft-attention-backend", "--decode-attention-backend"):
    try:
        args = prepare_server_args(["--model-path", "dummy", "--attention-backend", "triton",
                                    flag, "aiter-ext"])
        if hasattr(args, "resolve_once"):
            args.resolve_once()
        errors.append(None)
    except Exception as exc:
        errors.append(f"{type(exc).__name__}: {exc}")
print("RESULT " + json.dumps(errors))
"""


def test_the_error_names_the_flag_that_selected_aiter_ext() -> None:
    """No ROCm here: the launch stops at argument resolution, naming the option the user typed."""
    speculative, decode = run_python(FLAG_TYPED).data
    for flag, error in (("--speculative-draft-attention-backend", speculative),
                        ("--decode-attention-backend", decode)):
        assert error.startswith(f"AiterUnavailableError: {flag} aiter-ext cannot run here: ")
        assert error.endswith(f"(e.g. {flag} triton).")
        assert "--attention-backend aiter-ext" not in error
