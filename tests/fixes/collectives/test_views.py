"""The unregistered forms handed to sglang's methods, and the hook's choice of view."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from sglang_aiter_plugin.fixes.collectives import (
    all_gather,
    fused_ar_rmsnorm,
    reduce_scatter,
    views,
)
from sglang_aiter_plugin.fixes.collectives.hook import Hook
from sglang_aiter_plugin.fixes.collectives.switches import Plan, Switch
from sglang_aiter_plugin.fixes.collectives.views import (
    CoordinatorView,
    UnregisteredAllGather,
    UnregisteredFusedArRms,
    UnregisteredReduceScatter,
    fused_forms_taken,
)
from testkit.doubles.communicator import (
    MARK,
    CommunicatorWithoutUnregisteredFused,
    RecordingCommunicator,
)

X, W = torch.ones((1, 128)), torch.ones(128)


def test_reduce_scatter_view_overrides_an_explicit_registered_true() -> None:
    comm = RecordingCommunicator(capturing=True)
    UnregisteredReduceScatter(comm).reduce_scatter(X, X, 0, registered=True)
    assert comm.calls == [("reduce_scatter", False)]


def test_all_gather_view_calls_the_unregistered_kernel_with_the_same_arguments() -> None:
    comm = RecordingCommunicator(capturing=True)
    out = torch.zeros((2, 128))
    UnregisteredAllGather(comm).all_gather_reg(X, out=out, dim=0)
    assert comm.calls == [("all_gather_unreg", False)]
    assert out[0, 0].item() == MARK


def test_fused_view_takes_the_unregistered_form_when_the_communicator_has_it() -> None:
    comm = RecordingCommunicator(capturing=True)
    view = UnregisteredFusedArRms(comm)
    out = view.custom_fused_ar_rms(X, X, W, 1e-6, True)
    quant = view.custom_fused_ar_rms_per_group_quant(X, X, W, 1e-6, 128, True, emit_bf16=True)
    assert comm.calls == [("fused_ar_rms", False), ("fused_ar_rms_per_group_quant", False)]
    assert len(out) == 2
    assert len(quant) == 4
    assert "unregistered" in fused_forms_taken()


def test_fused_view_gives_none_without_the_unregistered_form() -> None:
    comm = CommunicatorWithoutUnregisteredFused(capturing=True)
    view = UnregisteredFusedArRms(comm)
    assert view.custom_fused_ar_rms(X, X, W, 1e-6, True) is None
    assert view.custom_fused_ar_rms_per_group_quant(X, X, W, 1e-6) is None
    assert comm.calls == []
    assert "unfused" in fused_forms_taken()


def test_fused_view_keeps_aiters_own_gate() -> None:
    comm = RecordingCommunicator(capturing=True)
    comm.should_custom_ar = lambda inp, *a, **k: False  # type: ignore[method-assign]
    assert UnregisteredFusedArRms(comm).custom_fused_ar_rms(X, X, W, 1e-6, True) is None
    assert comm.calls == []


@pytest.mark.parametrize("view", [UnregisteredReduceScatter, UnregisteredAllGather,
                                  UnregisteredFusedArRms])
def test_views_answer_hasattr_as_the_communicator_does(view: Any) -> None:
    bare = view(object())
    for name in ("reduce_scatter", "all_gather_reg", "custom_fused_ar_rms", "fused_ar_rms",
                 "disabled"):
        assert not hasattr(bare, name), name
    full = view(RecordingCommunicator(capturing=True))
    assert full.disabled is False
    assert hasattr(full, "custom_fused_ar_rms")


def test_coordinator_view_replaces_only_the_communicator() -> None:
    coordinator = type("Coordinator", (), {"world_size": 2, "ca_comm": "real"})()
    view = CoordinatorView(coordinator, "view")
    assert view.ca_comm == "view"
    assert view.world_size == 2


@pytest.mark.parametrize(("capturing", "unsafe", "wanted"), [
    (True, True, "view"), (True, False, "self"), (False, True, "self")])
def test_hook_hands_the_view_only_to_a_real_stream_capture_that_must_not_register(
    monkeypatch: pytest.MonkeyPatch, capturing: bool, unsafe: bool, wanted: str
) -> None:
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: capturing)
    hook = Hook("test", "UnregisteredReduceScatter")
    hook.plan = Plan(ignored=(Switch.COPY_IN,), copy_in=unsafe)
    coordinator = object()
    got = hook.view_for(coordinator, RecordingCommunicator(capturing=True))
    assert ("view" if isinstance(got, CoordinatorView) else "self") == wanted


def test_hook_without_a_plan_changes_nothing() -> None:
    coordinator = object()
    assert Hook("test", "UnregisteredReduceScatter").view_for(coordinator, None) is coordinator


@pytest.mark.parametrize(("module", "view"), [(all_gather, UnregisteredAllGather),
                                              (reduce_scatter, UnregisteredReduceScatter),
                                              (fused_ar_rmsnorm, UnregisteredFusedArRms)])
def test_each_collectives_hook_names_its_view(module: Any, view: type) -> None:
    """Hooks name their view (imported at the first capture that needs it): a wrong name would
    fail only inside a capture."""
    assert getattr(views, module.HOOK.view) is view
