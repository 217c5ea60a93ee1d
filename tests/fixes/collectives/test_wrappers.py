"""What a capture gets (the communicator views), and which capture gets it (the wrapper)."""

from __future__ import annotations

import logging
import types
from typing import Any

import pytest
import torch

from sglang_aiter_plugin._rebind import Overlay
from sglang_aiter_plugin.fixes.collectives import (
    ALL_GATHER,
    FUSED_AR_RMSNORM,
    REDUCE_SCATTER,
    wrappers,
)
from sglang_aiter_plugin.fixes.collectives.fix import CollectiveFix
from sglang_aiter_plugin.fixes.collectives.plan import Plan
from sglang_aiter_plugin.fixes.collectives.wrappers import (
    UNREGISTERED,
    communicator_view,
    coordinator_for,
)
from testkit.doubles.communicator import (
    MARK as OUT,
)
from testkit.doubles.communicator import (
    CommunicatorWithoutUnregisteredFused,
    RecordingCommunicator,
)

X, W = torch.ones((1, 128)), torch.ones(128)


def view_of(comm: Any) -> Any:
    """What a wrapped method's capture gets under a condition: the collective table's view."""
    return communicator_view(comm, UNREGISTERED)



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
    monkeypatch.setattr(wrappers, "_taken", set())
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
    coordinator = object()
    got = coordinator_for(Plan(copy_in=unsafe), coordinator, RecordingCommunicator(capturing=True))
    assert ("view" if isinstance(got, Overlay) else "self") == wanted


def test_a_fix_without_a_plan_changes_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    coordinator = object()
    assert coordinator_for(None, coordinator, None) is coordinator


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
    coordinator = types.SimpleNamespace(ca_comm=comm)
    collective.wrap(lambda target, *args: call(target.ca_comm))(coordinator)
    assert comm.calls == [made]


@pytest.mark.parametrize("flag", [True, None])
def test_an_all_reduce_on_a_communicator_without_either_switch_says_it_still_registers(
        flag: bool | None, logged: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """No sglang release builds such a communicator; if one appears, the capture cannot be taken
    off its registered path, and the log says so instead of nothing."""
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    comm = RecordingCommunicator(capturing=True, register_flag=flag)
    for _ in range(2):
        view_of(comm).custom_all_reduce(X)
    assert comm.calls == [("custom_all_reduce", flag is None)] * 2
    warned = [m for m in logged() if "without enable_register_for_capturing" in m]
    assert len(warned) == (1 if flag is None else 0)
    if flag is None:
        assert "RecordingCommunicator" in warned[0]
        assert "cannot take it off that path" in warned[0]
