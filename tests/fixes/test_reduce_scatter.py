"""``reduce-scatter-tms`` through sglang's real ``load_plugins()`` and ``HookRegistry``.

A fresh interpreter per ``SGLANG_AITER_CAPTURE_COPY_IN`` value (sglang reads it once, at import)
loads the plugins the way a launcher does, then calls the real
``GroupCoordinator._maybe_aiter_reduce_scatter`` (hooked) and the method below the hook
(sglang's own) with the recording communicator double, for every branch x TMS x communicator
flag. Only what cannot exist here is simulated: ROCm (``is_hip``) and stream capture
(``torch.cuda.is_current_stream_capturing``); piecewise capture uses sglang's own context manager.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from packaging.version import Version

from sglang_aiter_plugin.fixes.reduce_scatter_probe import Switch
from testkit.doubles.communicator import MARK
from testkit.subproc import run_python
from tests.fixes.reduce_scatter_facts import FIRST_WITH_METHOD, NEWEST_KNOWN, honoured_upstream

BRANCHES = ("capturing", "warm-up", "piecewise", "eager")
FLAGS = (True, False, None)  # the communicator's enable_register_for_capturing; None: missing

MATRIX = """
import inspect, itertools, os
from contextlib import nullcontext
import torch
import sglang_aiter_plugin
from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry
load_plugins()
sglang_aiter_plugin.register(); sglang_aiter_plugin.register()
load_plugins()
HookRegistry.apply_hooks()
from sglang.srt.distributed import parallel_state as ps
from sglang.srt.model_executor.runner_backend_utils.tc_piecewise_cuda_graph.context_manager \\
    import enable_tc_piecewise_cuda_graph
from sglang_aiter_plugin._registration import last_statuses
from sglang_aiter_plugin.fixes.reduce_scatter_hook import TARGET
from testkit.doubles.communicator import RecordingCommunicator

ps.is_hip = lambda: True  # ROCm cannot exist here
stream = {"capturing": False}
torch.cuda.is_current_stream_capturing = lambda: stream["capturing"]
hooked = ps.GroupCoordinator.__dict__["_maybe_aiter_reduce_scatter"]
upstream = inspect.unwrap(hooked)

def layers(fn):
    n = 0
    while hasattr(fn, "__wrapped__"):
        fn, n = fn.__wrapped__, n + 1
    return n

def call(method, branch, tms, flag):
    os.environ["SGLANG_MEMORY_SAVER_CUDA_GRAPH"] = "1" if tms else "0"
    comm = RecordingCommunicator(capturing=branch != "eager", register_flag=flag)
    coordinator = object.__new__(ps.GroupCoordinator)
    coordinator.ca_comm, coordinator.world_size = comm, 2
    out, inp = torch.full((1, 8), 3.0), torch.ones((2, 8))
    stream["capturing"] = branch == "capturing"
    with enable_tc_piecewise_cuda_graph() if branch == "piecewise" else nullcontext():
        handled = method(coordinator, out, inp)
    stream["capturing"] = False
    return {"handled": handled, "registered": comm.registered, "out": out[0, 0].item()}

cases = {}
for branch, tms, flag in itertools.product(BRANCHES, (False, True), FLAGS):
    key = f"{branch}|{tms}|{flag}"
    cases[key] = {
        "hooked": call(lambda c, o, i: c._maybe_aiter_reduce_scatter(o, i), branch, tms, flag),
        "upstream": call(upstream, branch, tms, flag),
    }
print("RESULT " + json.dumps({
    "status": {s.name: [s.state.value, s.detail] for s in last_statuses()}["reduce-scatter-tms"],
    "layers": layers(hooked),
    "hooks": len(HookRegistry._hooks.get(TARGET, [])),
    "cases": cases,
}))
""".replace("BRANCHES", repr(BRANCHES)).replace("FLAGS", repr(FLAGS))

_runs: dict[bool, Any] = {}


@pytest.fixture
def has_method(sglang_version: Version) -> None:
    if sglang_version < FIRST_WITH_METHOD:
        pytest.skip(f"sglang {sglang_version} has no GroupCoordinator._maybe_aiter_reduce_scatter")


def matrix(copy_in: bool) -> Any:
    if copy_in not in _runs:
        env = {"SGLANG_DP_USE_REDUCE_SCATTER": "1",
               "SGLANG_AITER_CAPTURE_COPY_IN": "1" if copy_in else "0"}
        _runs[copy_in] = run_python(MATRIX, env=env).data
    return _runs[copy_in]


def expected(branch: str, *, tms: bool, copy_in: bool, flag: bool | None,
             honoured: frozenset[Switch]) -> dict[str, Any]:
    """sglang's branch outcome when the switches in ``honoured`` are honoured."""
    if branch == "warm-up":
        return {"handled": True, "registered": [], "out": 0.0}
    if branch != "capturing":
        return {"handled": True, "registered": [False], "out": MARK}
    unsafe = ((tms and Switch.TMS in honoured) or (copy_in and Switch.COPY_IN in honoured)
              or (flag is False and Switch.COMM_FLAG in honoured))
    return {"handled": True, "registered": [not unsafe], "out": MARK}


@pytest.mark.parametrize("copy_in", [False, True], ids=["copy-in-off", "copy-in-on"])
@pytest.mark.parametrize(("branch", "tms", "flag"),
                         list(itertools.product(BRANCHES, (False, True), FLAGS)),
                         ids=lambda v: str(v))
def test_hooked_method_gives_the_safe_registered_value(has_method, branch: str, tms: bool,  # type: ignore[no-untyped-def]
                                                       flag: bool | None, copy_in: bool) -> None:
    got = matrix(copy_in)["cases"][f"{branch}|{tms}|{flag}"]["hooked"]
    assert got == expected(branch, tms=tms, copy_in=copy_in, flag=flag, honoured=frozenset(Switch))


@pytest.mark.parametrize("copy_in", [False, True], ids=["copy-in-off", "copy-in-on"])
def test_upstream_behaviour_is_what_the_probe_reported(has_method, sglang_version: Version,  # type: ignore[no-untyped-def]
                                                       copy_in: bool) -> None:
    if sglang_version > NEWEST_KNOWN:
        pytest.skip(f"no recorded facts for sglang {sglang_version}")
    honoured = honoured_upstream(sglang_version)
    for (branch, tms, flag) in itertools.product(BRANCHES, (False, True), FLAGS):
        got = matrix(copy_in)["cases"][f"{branch}|{tms}|{flag}"]["upstream"]
        want = expected(branch, tms=tms, copy_in=copy_in, flag=flag, honoured=honoured)
        assert got == want, (branch, tms, flag)


def test_verdict_and_a_single_layer(has_method, sglang_version: Version) -> None:  # type: ignore[no-untyped-def]
    data = matrix(False)
    state, detail = data["status"]
    ignored = set(Switch) - honoured_upstream(sglang_version)
    assert state == "applied"
    names = ", ".join(s.value for s in Switch if s in ignored)
    assert f"registers during capture despite {names};" in detail
    assert data["layers"] == 1
    assert data["hooks"] == 1


def test_release_without_the_method_is_skipped_and_untouched(plugins_loaded,  # type: ignore[no-untyped-def]
                                                             sglang_version: Version) -> None:
    if sglang_version >= FIRST_WITH_METHOD:
        pytest.skip(f"sglang {sglang_version} has the method; this is for 0.5.11-0.5.14")
    from sglang.srt.plugins.hook_registry import HookRegistry

    from sglang_aiter_plugin._registration import last_statuses
    from sglang_aiter_plugin.fixes.reduce_scatter_hook import TARGET, current_plan

    status = {s.name: s for s in last_statuses() or []}["reduce-scatter-tms"]
    assert status.state.value == "skipped"
    assert status.detail == (f"sglang {sglang_version} has no GroupCoordinator."
                             "_maybe_aiter_reduce_scatter: no AITER reduce-scatter path to fix")
    assert TARGET not in HookRegistry._hooks
    assert current_plan() is None


def test_doctor_shows_the_verdict_with_its_reason(plugins_loaded) -> None:  # type: ignore[no-untyped-def]
    from sglang_aiter_plugin._doctor import Report, _check_fixes, render_table
    from sglang_aiter_plugin._registration import last_statuses

    status = {s.name: s for s in last_statuses() or []}["reduce-scatter-tms"]
    report = Report()
    _check_fixes(report)
    line = next(ln for ln in render_table(report).splitlines() if "fix reduce-scatter-tms" in ln)
    assert line.startswith("ok ")
    assert line.endswith(f"{status.state.value}: {status.detail}")
    assert status.detail  # a verdict always comes with its reason
