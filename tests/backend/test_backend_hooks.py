"""The backend's cold-path contract: the graph set-up that grows a pool tells the observers once,
after the pool re-pointed every holder; nothing is added to per-step methods."""

from __future__ import annotations

import pytest

from sglang_aiter_plugin.plugin import hookimpl
from sglang_aiter_plugin.plugin.spec import PoolResize
from testkit.plugins import use_manager
from testkit.sglang_setup import Setup

PER_STEP = (
    "init_forward_metadata",
    "init_forward_metadata_out_graph",
    "init_forward_metadata_in_graph",
    "init_forward_metadata_capture_cuda_graph",
    "init_forward_metadata_replay_cuda_graph",
    "forward_decode",
    "forward_extend",
    "forward",
)


class Observer:
    def __init__(self) -> None:
        self.events: list[PoolResize] = []
        self.saw_repointed: list[bool] = []

    @hookimpl
    def aiter_ext_pool_resized(self, event: PoolResize) -> None:
        self.events.append(event)
        self.saw_repointed.append(event.owner.kv_indptr is event.pool.tensor("kv_indptr")
                                  and event.pool.stale_bindings() == [])


@pytest.fixture
def observer(monkeypatch: pytest.MonkeyPatch) -> Observer:
    obs = Observer()
    use_manager(monkeypatch, [("third-party-observer", obs)])
    return obs


def test_per_step_methods_are_upstreams_own() -> None:
    from sglang.srt.layers.attention.aiter_backend import (
        AiterAttnBackend,
        AiterMultiStepDraftBackend,
    )

    from sglang_aiter_plugin.backend.classes import (
        AiterExtAttnBackend,
        AiterExtMultiStepDraftBackend,
    )

    for ours, theirs in (
        (AiterExtAttnBackend, AiterAttnBackend),
        (AiterExtMultiStepDraftBackend, AiterMultiStepDraftBackend),
    ):
        for name in PER_STEP:
            if hasattr(theirs, name):
                assert getattr(ours, name) is getattr(theirs, name), f"{ours.__name__}.{name}"


@pytest.mark.parametrize("sglang_setup", ["dp-attention"], indirect=True)
def test_third_party_observer_sees_one_growth_with_the_grown_backend(
    sglang_setup: Setup, observer: Observer
) -> None:
    from sglang_aiter_plugin.backend.classes import AiterExtAttnBackend

    backend = AiterExtAttnBackend(sglang_setup.runner)
    assert observer.events == []  # construction sizes the pool, it does not announce growth
    built = backend.buffer_pool.capacity
    assert built == sglang_setup.max_bs  # sglang's own graph maximum is known at construction
    graph = built + 2  # a graph runner capturing above sglang's rule
    backend.init_cuda_graph_state(graph, graph)
    backend.init_cuda_graph_state(graph, graph)  # e.g. pdmux
    (event,) = observer.events
    assert event.owner is backend
    assert event.pool is backend.buffer_pool
    assert (event.old_capacity, event.new_capacity) == (built, graph)
    assert f"max_bs={graph}" in event.reason
    assert observer.saw_repointed == [True]  # observers see a pool that is already right


@pytest.mark.parametrize("sglang_setup", ["dp-attention"], indirect=True)
def test_an_observer_that_raises_is_logged_and_the_backend_is_already_right(
    sglang_setup: Setup, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from sglang_aiter_plugin.backend.classes import AiterExtAttnBackend

    class Raising:
        @hookimpl
        def aiter_ext_pool_resized(self, event: PoolResize) -> None:
            raise RuntimeError("observer failed")

    use_manager(monkeypatch, [("raising", Raising())])
    backend = AiterExtAttnBackend(sglang_setup.runner)
    graph = backend.buffer_pool.capacity + 2
    backend.init_cuda_graph_state(graph, graph)
    assert backend.buffer_pool.capacity == graph
    assert backend.buffer_pool.stale_bindings() == []
    assert backend.buffer_pool.frozen  # the set-up went on to the end
    assert "an aiter_ext_pool_resized observer raised" in caplog.text
    assert "observer failed" in caplog.text
