"""Where the fixes install nothing, and when they decide: off ROCm, bare coordinators, deferral."""

from __future__ import annotations

from packaging.version import Version

from sglang_aiter_plugin.fixes.collectives import registered
from testkit.collective_facts import has_path, has_quant
from testkit.plugins import off_rocm_process
from testkit.subproc import run_python
from tests.fixes.collectives.scenario import METHODS, child_data, wrapped

FIXES = tuple(fix.name for fix in registered())

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
    data = off_rocm_process()
    for fix in FIXES:
        state, detail = data["statuses"][fix]
        assert state == "skipped"
        assert detail.startswith("not a ROCm (HIP) platform: sglang never takes an AITER ")
    assert data["wrapped"] == []


def test_a_coordinator_built_without_init_behaves_as_sglangs_own(sglang_version: Version) -> None:
    """The wrappers read nothing that raises: same result or same exception as sglang's method,
    with sglang's reduce-scatter off (it returns before reading ``ca_comm``) and on."""
    wanted = {m for m, fix in METHODS.items() if wrapped(fix, sglang_version)}
    if not has_quant(sglang_version):
        wanted.discard("fused_allreduce_rmsnorm_quant_per_group")
    for rs, run in child_data(False)["bare"].items():
        assert run["read"] in (None, rs == "1"), "sglang did not read the value set for it"
        assert set(run["methods"]) == wanted
        for name, got in run["methods"].items():
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
    assert list(data["before"]["statuses"]) == ["attention-backend", *FIXES]
    for fix in FIXES:
        state, detail = data["before"]["statuses"][fix]
        assert state == "pending"
        assert "decided when sglang imports sglang.srt.distributed.parallel_state (" in detail
    after_ps = data["after_ps"]["statuses"]
    assert [f for f in FIXES if after_ps[f][0] == "pending"] == []
    decided = data["after"]["statuses"]
    for fix in FIXES:
        want = ("applied" if wrapped(fix, sglang_version) else "skipped"
                if not has_path(fix, sglang_version) else "not needed")
        assert after_ps[fix] == decided[fix]  # importing custom_all_reduce changes nothing
        assert decided[fix][0] == want, decided[fix]
        assert f"sglang-aiter-plugin: {fix}={want} (" in result.stderr
    found = {n for n, w in data["after"]["wrapped"].items() if w}
    assert found == {n for n, f in METHODS.items()
                     if wrapped(f, sglang_version) and n in data["after"]["wrapped"]}
