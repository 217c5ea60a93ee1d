"""The hook's plan: what it reads once, what it reads per capture call, and its registration."""

from __future__ import annotations

import pytest
from packaging.version import Version

from sglang_aiter_plugin.fixes.reduce_scatter_hook import (
    TARGET,
    Plan,
    around_reduce_scatter,
    current_plan,
    install,
    plan_for,
)
from sglang_aiter_plugin.fixes.reduce_scatter_probe import Switch
from testkit.doubles.communicator import RecordingCommunicator
from tests.fixes.reduce_scatter_facts import FIRST_WITH_METHOD

ALL = tuple(Switch)


@pytest.fixture(scope="module")
def envs():  # type: ignore[no-untyped-def]
    from sglang.srt.environ import envs

    return envs


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1", True), ("0", False), ("true", False), (" 1", False), (None, False)],
)
def test_copy_in_follows_sglangs_rule(envs, value: str | None, expected: bool) -> None:  # type: ignore[no-untyped-def]
    environ = {} if value is None else {"SGLANG_AITER_CAPTURE_COPY_IN": value}
    assert plan_for(ALL, envs, environ).copy_in is expected


def test_copy_in_is_left_to_sglang_where_sglang_reads_it(envs) -> None:  # type: ignore[no-untyped-def]
    plan = plan_for((Switch.COMM_FLAG,), envs, {"SGLANG_AITER_CAPTURE_COPY_IN": "1"})
    assert plan.copy_in is False
    assert plan.tms_switch is None
    assert plan.honour_comm_flag


@pytest.mark.parametrize("flag", [True, False, None])
def test_communicator_flag_missing_means_allowed(flag: bool | None) -> None:
    plan = Plan(ignored=(Switch.COMM_FLAG,), copy_in=False, honour_comm_flag=True)
    communicator = RecordingCommunicator(capturing=True, register_flag=flag)
    assert plan.unregistered(communicator) is (flag is False)


def test_tms_is_read_per_call_through_sglangs_reader(monkeypatch, envs) -> None:  # type: ignore[no-untyped-def]
    plan = plan_for((Switch.TMS,), envs, {})
    communicator = RecordingCommunicator(capturing=True)
    for value, expected in (("1", True), ("0", False), ("yes", True), ("off", False)):
        monkeypatch.setenv("SGLANG_MEMORY_SAVER_CUDA_GRAPH", value)
        assert plan.unregistered(communicator) is expected, value
    monkeypatch.delenv("SGLANG_MEMORY_SAVER_CUDA_GRAPH")
    assert plan.unregistered(communicator) is False


def test_registration_is_one_around_hook(plugins_loaded, sglang_version: Version) -> None:  # type: ignore[no-untyped-def]
    if sglang_version < FIRST_WITH_METHOD:
        pytest.skip(f"sglang {sglang_version} has no target to hook (0.5.15+)")
    from sglang.srt.plugins.hook_registry import HookRegistry, HookType

    plan = current_plan()
    assert plan is not None, "load_plugins() applied the fix"
    assert install(plan) is False
    assert install(plan) is False
    hooks = HookRegistry._hooks[TARGET]
    assert [(kind, hook) for kind, hook, *_ in hooks] == [(HookType.AROUND, around_reduce_scatter)]


@pytest.mark.parametrize("keywords", [False, True], ids=["positional", "keywords"])
def test_hooked_method_accepts_sglangs_parameter_names(plugins_loaded, monkeypatch,  # type: ignore[no-untyped-def]
                                                       sglang_version: Version,
                                                       keywords: bool) -> None:
    if sglang_version < FIRST_WITH_METHOD:
        pytest.skip(f"sglang {sglang_version} has no target to hook (0.5.15+)")
    import torch
    from sglang.srt.distributed import parallel_state

    monkeypatch.setattr(parallel_state, "is_hip", lambda: True)  # ROCm cannot exist here
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    monkeypatch.setenv("SGLANG_DP_USE_REDUCE_SCATTER", "1")
    communicator = RecordingCommunicator(capturing=True, register_flag=False)
    coordinator = object.__new__(parallel_state.GroupCoordinator)
    coordinator.ca_comm, coordinator.world_size = communicator, 2
    out, inp = torch.zeros((1, 8)), torch.ones((2, 8))
    if keywords:
        handled = coordinator._maybe_aiter_reduce_scatter(output=out, input=inp)
    else:
        handled = coordinator._maybe_aiter_reduce_scatter(out, inp)
    assert handled is True
    assert communicator.registered == [False]
