"""Where the fixes install nothing, and when they decide: off ROCm, bare coordinators, deferral."""

from __future__ import annotations

from packaging.version import Version

from testkit.collective_facts import has_path, has_quant
from testkit.subproc import run_python
from tests.fixes.collectives.scenario import METHODS

FIXES = ("capture-all-reduce", "capture-all-gather", "capture-reduce-scatter",
         "capture-fused-ar-rmsnorm")

STATE = """
import sys
from sglang_aiter_plugin._registration import last_statuses
def state():
    ps = sys.modules.get("sglang.srt.distributed.parallel_state")
    wrapped = {}
    if ps is not None:
        wrapped = {n: hasattr(ps.GroupCoordinator.__dict__[n], "__wrapped__")
                   for n in METHODS if n in ps.GroupCoordinator.__dict__}
    return {"statuses": {s.name: [s.state.value, s.detail] for s in last_statuses()},
            "wrapped": wrapped, "imported": ps is not None}
""".replace("METHODS", repr(tuple(METHODS)))


def test_off_rocm_nothing_is_installed_and_the_status_says_so() -> None:
    code = STATE + """
from sglang.srt.distributed import parallel_state
from sglang.srt.plugins import load_plugins
load_plugins()
print("RESULT " + json.dumps(state()))
"""
    data = run_python(code).data
    for fix in FIXES:
        state, detail = data["statuses"][fix]
        assert state == "skipped"
        assert detail.startswith("not a ROCm (HIP) platform: sglang never takes an AITER ")
    assert not any(data["wrapped"].values())


def test_a_coordinator_built_without_init_behaves_as_sglangs_own(sglang_version: Version) -> None:
    """The wrappers read nothing that raises: same result or same exception as sglang's method."""
    code = """
import inspect
from testkit.doubles.rocm_platform import simulated_rocm
rocm = simulated_rocm(is_gfx95_supported=True); rocm.__enter__()
from sglang.srt.distributed import parallel_state as ps
from sglang.srt.plugins import load_plugins
load_plugins()
import torch
def outcome(fn, coordinator, args):
    try:
        return ["returned", repr(fn(coordinator, *args))]
    except Exception as exc:
        return ["raised", type(exc).__name__]
args = {"_all_gather_into_tensor": (torch.zeros(2, 8), torch.zeros(1, 8)),
        "_maybe_aiter_reduce_scatter": (torch.zeros(1, 8), torch.zeros(2, 8))}
fused = (torch.zeros(1, 128), torch.zeros(1, 128), torch.ones(128), 1e-6)
found = {}
for name in METHODS:
    raw = ps.GroupCoordinator.__dict__.get(name)
    if raw is None or not hasattr(raw, "__wrapped__"):
        continue
    bare = object.__new__(ps.GroupCoordinator)  # as sglang's own unit tests build them
    found[name] = {"hooked": outcome(raw, bare, args.get(name, fused)),
                   "upstream": outcome(inspect.unwrap(raw), bare, args.get(name, fused))}
print("RESULT " + json.dumps(found))
""".replace("METHODS", repr(tuple(METHODS)))
    for rs in ("0", "1"):  # sglang's reduce-scatter returns False before reading ca_comm when off
        data = run_python(code, env={"SGLANG_DP_USE_REDUCE_SCATTER": rs}).data
        wanted = {m for m, fix in METHODS.items() if has_path(fix, sglang_version)}
        if not has_quant(sglang_version):
            wanted.discard("fused_allreduce_rmsnorm_quant_per_group")
        assert set(data) == wanted
        for name, got in data.items():
            assert got["hooked"] == got["upstream"], (name, rs)


def test_decision_waits_for_parallel_state_and_is_logged_then(sglang_version: Version) -> None:
    code = STATE + """
from testkit.doubles.rocm_platform import simulated_rocm
rocm = simulated_rocm(); rocm.__enter__()
from sglang.srt.plugins import load_plugins
load_plugins()
before = state()
from sglang.srt.distributed import parallel_state
after_ps = state()
from sglang.srt.distributed.device_communicators import custom_all_reduce
print("RESULT " + json.dumps({"before": before, "after_ps": after_ps, "after": state()}))
"""
    result = run_python(code)
    data = result.data
    assert data["before"]["imported"] is False  # the plugin's load did not import it
    for fix in FIXES:
        state, detail = data["before"]["statuses"][fix]
        assert state == "pending"
        waits_for = ("sglang.srt.distributed.device_communicators.custom_all_reduce"
                     if fix == "capture-all-reduce" else "sglang.srt.distributed.parallel_state")
        assert f"decided when sglang imports {waits_for} (" in detail
    after_ps = data["after_ps"]["statuses"]
    assert {f for f in FIXES if after_ps[f][0] == "pending"} == {"capture-all-reduce"}
    decided = data["after"]["statuses"]
    assert decided["capture-all-reduce"][0] == "not needed"
    for fix in FIXES[1:]:
        want = "applied" if has_path(fix, sglang_version) else "skipped"
        assert after_ps[fix] == decided[fix]
        assert decided[fix][0] == want, decided[fix]
        assert f"sglang-aiter-plugin: {fix}={want} (" in result.stderr
    wrapped = {n for n, w in data["after"]["wrapped"].items() if w}
    assert wrapped == {n for n, f in METHODS.items()
                       if has_path(f, sglang_version) and n in data["after"]["wrapped"]}
