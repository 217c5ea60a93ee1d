"""The backend's cold-path contract: graph set-up grows the pool without the fix registry; nothing
is added to per-step methods."""

from __future__ import annotations

import sys

import pytest

from testkit.plugin_state import pool_frozen
from testkit.sglang_setup import Setup
from testkit.subproc import run_python

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
def test_graph_set_up_grows_the_pool_without_the_fix_registry(
    sglang_setup: Setup, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglang_aiter_plugin.backend.classes import AiterExtAttnBackend

    for name in ("pluggy", "sglang_aiter_plugin.plugin", "sglang_aiter_plugin.plugin.manager",
                 "sglang_aiter_plugin.plugin.spec"):
        monkeypatch.setitem(sys.modules, name, None)  # any import of them raises
    backend = AiterExtAttnBackend(sglang_setup.runner)
    built = backend.buffer_pool.capacity
    assert built == sglang_setup.max_bs  # sglang's own graph maximum is known at construction
    graph = built + 2  # a graph runner capturing above sglang's rule
    backend.init_cuda_graph_state(graph, graph)
    assert backend.buffer_pool.capacity == graph
    assert backend.buffer_pool.stale_bindings() == []
    assert pool_frozen(backend.buffer_pool)  # the set-up went on to the end


IMPORTS = """
import sglang_aiter_plugin.backend.classes, sglang_aiter_plugin.backend.pool
print("RESULT " + json.dumps(sorted(m for m in sys.modules
                                    if m == "pluggy" or m.startswith("sglang_aiter_plugin."))))
"""


def test_the_backend_and_the_pool_import_nothing_of_the_fix_registry() -> None:
    imported = run_python(IMPORTS).data
    assert "sglang_aiter_plugin.backend.classes" in imported
    assert [m for m in imported if m == "pluggy" or ".plugin" in m or ".fixes" in m] == []
