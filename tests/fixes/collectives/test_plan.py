"""What a capture checks: the conditions sglang ignores, as the plan reads them."""

from __future__ import annotations

import pytest

from sglang_aiter_plugin.fixes.collectives.plan import Plan, plan_for
from sglang_aiter_plugin.fixes.collectives.probe import Condition
from testkit.doubles.communicator import RecordingCommunicator

ALL = tuple(Condition)


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


def test_conditions_sglang_honours_are_left_to_sglang(envs) -> None:  # type: ignore[no-untyped-def]
    plan = plan_for((Condition.COMM_FLAG,), envs, {"SGLANG_AITER_CAPTURE_COPY_IN": "1"})
    assert plan == Plan(copy_in=False, tms=None, comm_flag=True)


@pytest.mark.parametrize("flag", [True, False, None])
def test_communicator_flag_missing_means_allowed(flag: bool | None) -> None:
    plan = Plan(comm_flag=True)
    communicator = RecordingCommunicator(capturing=True, register_flag=flag)
    assert plan.unregistered(communicator) is (flag is False)


def test_tms_is_read_per_call_through_sglangs_reader(monkeypatch, envs) -> None:  # type: ignore[no-untyped-def]
    plan = plan_for((Condition.TMS,), envs, {})
    communicator = RecordingCommunicator(capturing=True)
    for value, expected in (("1", True), ("0", False), ("yes", True), ("off", False)):
        monkeypatch.setenv("SGLANG_MEMORY_SAVER_CUDA_GRAPH", value)
        assert plan.unregistered(communicator) is expected, value
    monkeypatch.delenv("SGLANG_MEMORY_SAVER_CUDA_GRAPH")
    assert plan.unregistered(communicator) is False
