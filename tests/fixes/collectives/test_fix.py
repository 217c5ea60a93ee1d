"""What a capture checks (the plan), what it gets (the views), and how wrappers are installed."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from sglang_aiter_plugin._patch import MARK, wrap_once
from sglang_aiter_plugin._rebind import Overlay
from sglang_aiter_plugin._status import FixState, FixStatus
from sglang_aiter_plugin.fixes.collectives import (
    ALL_GATHER,
    FUSED_AR_RMSNORM,
    REDUCE_SCATTER,
    fix,
)
from sglang_aiter_plugin.fixes.collectives.fix import (
    UNREGISTERED,
    CollectiveFix,
    Decision,
    Method,
    Plan,
    calling_with,
    communicator_view,
    is_installed,
    plan_for,
)
from sglang_aiter_plugin.fixes.collectives.probe import Condition
from testkit.doubles.communicator import (
    MARK as OUT,
)
from testkit.doubles.communicator import (
    CommunicatorWithoutUnregisteredFused,
    RecordingCommunicator,
)
from testkit.subproc import run_python
from tests.fixes.collectives.scenario import METHODS

X, W = torch.ones((1, 128)), torch.ones(128)


def view_of(comm: Any) -> Any:
    """What a wrapped method's capture gets under a condition: the collective table's view."""
    return communicator_view(comm, UNREGISTERED)

ALL = tuple(Condition)


def layers(cls: type, name: str) -> int:
    """How many wrappers (the plugin's and anyone's) sit on ``cls.name``."""
    fn, n = vars(cls)[name], 0
    while hasattr(fn, "__wrapped__"):
        fn, n = fn.__wrapped__, n + 1
    return n


# -- the plan -------------------------------------------------------------------------------------


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


# -- the views ------------------------------------------------------------------------------------


def test_reduce_scatter_view_overrides_an_explicit_registered_true() -> None:
    comm = RecordingCommunicator(capturing=True)
    view_of(comm).reduce_scatter(X, X, 0, registered=True)
    assert comm.calls == [("reduce_scatter", False)]


def test_all_gather_view_calls_the_unregistered_kernel_with_the_same_arguments() -> None:
    comm = RecordingCommunicator(capturing=True)
    out = torch.zeros((2, 128))
    view_of(comm).all_gather_reg(X, out=out, dim=0)
    assert comm.calls == [("all_gather_unreg", False)]
    assert out[0, 0].item() == OUT


@pytest.fixture
def logged(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> Any:
    """The plugin's log lines in this test, as if no fused capture had run in this process yet
    (each form is logged once per process; earlier tests took some)."""
    monkeypatch.setattr(fix, "_taken", set())
    caplog.set_level(logging.INFO, logger="sglang_aiter_plugin")
    return lambda: [r.getMessage() for r in caplog.records]


def test_fused_view_takes_the_unregistered_form_and_logs_it_once(logged: Any) -> None:
    comm = RecordingCommunicator(capturing=True)
    view = view_of(comm)
    out = view.custom_fused_ar_rms(X, X, W, 1e-6, True)
    quant = view.custom_fused_ar_rms_per_group_quant(X, X, W, 1e-6, 128, True, emit_bf16=True)
    assert comm.calls == [("fused_ar_rms", False), ("fused_ar_rms_per_group_quant", False)]
    assert len(out) == 2
    assert len(quant) == 4
    assert logged() == [
        "sglang-aiter-plugin: a fused all-reduce+RMSNorm capture (fused_ar_rms) got the "
        "communicator's unregistered form (registered=False)"]


def test_fused_view_refuses_more_arguments_than_aiter_takes(logged: Any) -> None:
    comm = RecordingCommunicator(capturing=True)
    with pytest.raises(TypeError, match="fused_ar_rms: 4 arguments after eps"):
        view_of(comm).custom_fused_ar_rms(X, X, W, 1e-6, True, 0, False, "a fourth")
    assert comm.calls == []
    assert logged() == []  # refused before any form was taken


def test_fused_view_gives_none_without_the_unregistered_form(logged: Any) -> None:
    comm = CommunicatorWithoutUnregisteredFused(capturing=True)
    view = view_of(comm)
    assert view.custom_fused_ar_rms(X, X, W, 1e-6, True) is None
    assert view.custom_fused_ar_rms_per_group_quant(X, X, W, 1e-6) is None
    assert comm.calls == []
    assert logged() == [
        "sglang-aiter-plugin: a fused all-reduce+RMSNorm capture (fused_ar_rms) got None (the "
        "communicator has no unregistered form), so sglang runs its unfused all-reduce and "
        "RMSNorm"]


def test_fused_view_keeps_aiters_own_gate(logged: Any) -> None:
    comm = RecordingCommunicator(capturing=True)
    comm.should_custom_ar = lambda inp, *a, **k: False  # type: ignore[method-assign]
    assert view_of(comm).custom_fused_ar_rms(X, X, W, 1e-6, True) is None
    assert comm.calls == []
    assert logged() == []


def test_all_gather_view_keeps_the_output_aiter_allocates_when_given_none() -> None:
    comm = RecordingCommunicator(capturing=True)
    got = view_of(comm).all_gather_reg(torch.ones((3, 8)), dim=0)
    assert comm.calls == [("all_gather_unreg", False)]
    assert tuple(got.shape) == (6, 8)
    assert got[5, 0].item() == OUT


@pytest.fixture
def stream_capturing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)


@pytest.mark.usefixtures("stream_capturing")
def test_reduce_scatter_view_returns_what_aiter_returns_and_leaves_its_own_call_alone() -> None:
    """aiter's ``reduce_scatter`` returns nothing; its ``custom_reduce_scatter`` (``None`` even on
    success) follows the communicator flag itself and is not one the view replaces."""
    comm = RecordingCommunicator(capturing=True, register_flag=False)
    out = torch.zeros((1, 8))
    view = view_of(comm)
    assert view.reduce_scatter(torch.ones((2, 8)), out, registered=True) is None
    assert view.custom_reduce_scatter(torch.ones((2, 8)), out) is None
    assert comm.calls == [("reduce_scatter", False), ("reduce_scatter", False)]
    assert out[0, 0].item() == OUT


@pytest.mark.parametrize(("call", "args", "made", "outputs"), [
    ("custom_fused_ar_rms_quant", (X, X, W, 1e-6, True), "fused_ar_rms", 3),
    ("custom_fused_ar_rms_mxfp4_quant", (X, X, W, 1e-6, False, True),
     "fused_ar_rms_mxfp4_quant", 4),
    ("custom_fused_qknorm_ar", (torch.ones((2, 192)), W[:64], W[:64], 1e-6),
     "fused_qknorm_ar", 3),
    ("custom_fused_qknorm_ar_rope", (torch.ones((2, 192)), W[:64], W[:64], torch.ones((8, 64)),
                                     torch.zeros(2), 64, 64, 1e-6), "fused_qknorm_ar_rope", 3),
])
@pytest.mark.usefixtures("stream_capturing")
def test_fused_view_gives_aiters_further_fused_calls_their_unregistered_counterpart(
    logged: Any, call: str, args: tuple[Any, ...], made: str, outputs: int
) -> None:
    comm = RecordingCommunicator(capturing=True)
    got = getattr(view_of(comm), call)(*args)
    assert comm.calls == [(made, False)]
    assert len(got) == outputs
    assert got[0].flatten()[0].item() == OUT
    getattr(comm, call)(*args)  # aiter's own call, during the same capture, registers
    assert comm.calls[-1] == (made, True)


def test_the_qknorm_view_keeps_aiters_answer_for_a_disabled_communicator() -> None:
    comm = RecordingCommunicator(capturing=True)
    comm.disabled = True
    q, k, v = view_of(comm).custom_fused_qknorm_ar(torch.ones((2, 192)), W[:64], W[:96], 1e-6)
    assert comm.calls == []  # no collective, as aiter: unfilled outputs of the right widths
    assert (q.shape[1], k.shape[1], v.shape[1]) == (64, 96, 32)


def test_views_answer_hasattr_as_the_communicator_does() -> None:
    bare = view_of(object())
    for name in ("reduce_scatter", "all_gather_reg", "custom_fused_ar_rms", "fused_ar_rms",
                 "disabled"):
        assert not hasattr(bare, name), name
    full = view_of(RecordingCommunicator(capturing=True))
    assert full.disabled is False
    assert hasattr(full, "custom_fused_ar_rms")


def test_coordinator_view_replaces_only_the_communicator() -> None:
    coordinator = type("Coordinator", (), {"world_size": 2, "ca_comm": "real"})()
    view = Overlay(coordinator, {"ca_comm": "view"})
    assert view.ca_comm == "view"
    assert view.world_size == 2


# -- the wrapper's choice -------------------------------------------------------------------------


def _with_plan(collective: CollectiveFix, plan: Plan | None,
               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collective, "plan", plan)


@pytest.mark.parametrize(("capturing", "unsafe", "wanted"), [
    (True, True, "view"), (True, False, "self"), (False, True, "self")])
def test_the_view_goes_only_to_a_real_stream_capture_that_must_not_register(
    monkeypatch: pytest.MonkeyPatch, capturing: bool, unsafe: bool, wanted: str
) -> None:
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing)
    _with_plan(REDUCE_SCATTER, Plan(copy_in=unsafe), monkeypatch)
    coordinator = object()
    got = REDUCE_SCATTER.coordinator_for(coordinator, RecordingCommunicator(capturing=True))
    assert ("view" if isinstance(got, Overlay) else "self") == wanted


def test_a_fix_without_a_plan_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    _with_plan(ALL_GATHER, None, monkeypatch)
    coordinator = object()
    assert ALL_GATHER.coordinator_for(coordinator, None) is coordinator


@pytest.mark.parametrize(("collective", "call", "made"), [
    (ALL_GATHER, lambda comm: comm.all_gather_reg(X, torch.zeros((2, 128))),
     ("all_gather_unreg", False)),
    (REDUCE_SCATTER, lambda comm: comm.reduce_scatter(X, X, registered=True),
     ("reduce_scatter", False)),
    (FUSED_AR_RMSNORM, lambda comm: comm.custom_fused_ar_rms(X, X, W, 1e-6, True),
     ("fused_ar_rms", False)),
], ids=["all-gather", "reduce-scatter", "fused"])
def test_each_collective_hands_its_unregistered_form_to_a_capture(
    monkeypatch: pytest.MonkeyPatch, collective: CollectiveFix, call: Any, made: tuple[str, bool]
) -> None:
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    _with_plan(collective, Plan(copy_in=True), monkeypatch)
    comm = RecordingCommunicator(capturing=True)
    call(collective.coordinator_for(object(), comm).ca_comm)
    assert comm.calls == [made]


# -- installing on the class ----------------------------------------------------------------------


def test_sglangs_module_walk_finds_no_copy_of_any_wrapped_method(plugins_loaded) -> None:  # type: ignore[no-untyped-def]
    """``_propagate_patch`` (sglang's own) replaces module-level copies: these methods have none,
    so setting the class attribute is all ``HookRegistry`` would do."""
    import inspect

    from sglang.srt.distributed.parallel_state import GroupCoordinator
    from sglang.srt.plugins.hook_registry import _propagate_patch

    for name in [*METHODS, "_all_reduce_out_place"]:
        original = inspect.unwrap(vars(GroupCoordinator).get(name, None) or (lambda: None))
        assert _propagate_patch(original, object(), GroupCoordinator) == 0, name


class _Target:
    def method(self, x: int) -> int:
        """The target's docstring."""
        return x + 1


def _double(original: Any) -> Any:
    def method(self: Any, x: int) -> int:
        return int(2 * original(self, x))

    return method


def test_a_wrapper_is_installed_once_and_keeps_the_original_reachable() -> None:
    cls = type("Target", (_Target,), {"method": _Target.method})
    assert is_installed(cls, "method") is False
    assert wrap_once(cls, "method", "fix-a", _double) is True
    assert wrap_once(cls, "method", "fix-a", _double) is False
    wrapper = vars(cls)["method"]
    assert cls().method(1) == 4
    assert getattr(wrapper, MARK) == "fix-a"
    assert wrapper.__wrapped__ is _Target.method
    assert wrapper.__doc__ == "The target's docstring."
    assert layers(cls, "method") == 1
    assert is_installed(cls, "method") is True


def test_a_wrapper_below_another_layer_is_still_found() -> None:
    cls = type("Target", (_Target,), {"method": _Target.method})
    wrap_once(cls, "method", "fix-a", _double)

    def outer(self: Any, x: int) -> int:  # another plugin's layer: no mark of ours on it
        return 0

    outer.__wrapped__ = vars(cls)["method"]  # type: ignore[attr-defined]
    setattr(cls, "method", outer)  # noqa: B010
    assert not hasattr(outer, MARK)
    assert is_installed(cls, "method") is True
    assert wrap_once(cls, "method", "fix-a", _double) is False
    assert layers(cls, "method") == 2


def test_a_method_that_is_not_a_plain_function_fails_the_fix_and_nothing_is_wrapped(
        monkeypatch: pytest.MonkeyPatch) -> None:
    stock = staticmethod(lambda x: x)
    cls = type("GroupCoordinator", (), {"first": _Target.method, "second": stock})
    collective = CollectiveFix("capture-test", "test", invoke=calling_with(), how="-", ledger="-",
                               methods=(Method("first", ()), Method("second", ())))
    decided = Decision(FixStatus(collective.name, FixState.APPLIED, "-"),
                       methods=("first", "second"))
    monkeypatch.setattr(collective, "decide", lambda cls, version: decided)
    status = collective.decide_now(SimpleNamespace(GroupCoordinator=cls, envs=None), None)
    assert status.state is FixState.FAILED
    assert "GroupCoordinator.second is staticmethod, not a function" in status.detail
    assert vars(cls)["first"] is _Target.method  # all or nothing: the function is not wrapped
    assert vars(cls)["second"] is stock


def test_another_plugins_hook_registry_hook_wraps_the_plugins_wrapper() -> None:
    """sglang applies registered hooks after every plugin's ``register()``: both layers run."""
    code = """
from testkit.doubles.rocm_platform import simulated_rocm
rocm = simulated_rocm(); rocm.__enter__()
from sglang.srt.distributed import parallel_state as ps
from sglang.srt.plugins import load_plugins
from sglang.srt.plugins.hook_registry import HookRegistry, HookType
seen = []
def other(original, *args, **kwargs):
    seen.append("other")
    return original(*args, **kwargs)
HookRegistry.register("sglang.srt.distributed.parallel_state.GroupCoordinator."
                      "fused_allreduce_rmsnorm", other, HookType.AROUND)
load_plugins()
from sglang_aiter_plugin.fixes.collectives.fix import is_installed
fn, layers = ps.GroupCoordinator.__dict__["fused_allreduce_rmsnorm"], 0
while hasattr(fn, "__wrapped__"):
    fn, layers = fn.__wrapped__, layers + 1
c = object.__new__(ps.GroupCoordinator)
c.ca_comm = None
result = c.fused_allreduce_rmsnorm(None, None, None, 1e-6)
print("RESULT " + json.dumps({"seen": seen, "result": result,
    "ours": is_installed(ps.GroupCoordinator, "fused_allreduce_rmsnorm"), "layers": layers}))
"""
    data = run_python(code).data
    assert data == {"seen": ["other"], "result": None, "ours": True, "layers": 2}
