"""The pool's capacity at construction: sglang's own rules, the same rule where a release lacks
them, a named refusal where neither can be applied, and the draft wrapper with its children."""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from sglang_aiter_plugin.backend import capacity as capacity_module
from sglang_aiter_plugin.backend.capacity import BatchCapacityError, capacity_of
from testkit.batch_paths import SCENARIOS, graph_max
from testkit.plugin_state import pool_frozen
from testkit.sglang_setup import Setup, configure

COMMON = importlib.import_module("sglang.srt.utils.common")
SETTINGS = [("dp-attention", 33), ("dp-attention", 32), ("dp-attention-tp4", 34),
            ("two-batch-overlap", 33), ("plain", 33)]


@pytest.fixture
def setup_for(model_dir: Path) -> Iterator[object]:
    scopes = []

    def make(scenario: str, pool: int) -> Setup:
        s = configure(model_dir, SCENARIOS[scenario], pool=pool)
        s.scope.__enter__()
        scopes.append(s.scope)
        return s

    yield make
    for scope in reversed(scopes):
        scope.__exit__(None, None, None)


@pytest.mark.parametrize(("scenario", "pool"), SETTINGS)
def test_capacity_covers_sglangs_own_graph_maximum(
    scenario: str, pool: int, setup_for: object
) -> None:
    setup = setup_for(scenario, pool)  # type: ignore[operator]
    cap = capacity_of(setup.runner)
    assert cap.pool == pool
    assert cap.graph == graph_max(setup)  # the asked-for sizes reach past P: P padded is added
    assert cap.rows == max(cap.eager, cap.graph)


@pytest.mark.parametrize(("scenario", "pool"), SETTINGS)
def test_the_rule_agrees_with_sglangs_functions_where_both_exist(
    scenario: str, pool: int, setup_for: object
) -> None:
    """On releases with ``get_eager_max_batch_size``, the fallback rule gives the same sizes."""
    if not hasattr(COMMON, "get_eager_max_batch_size"):
        pytest.skip("this release has only the rule (0.5.11-0.5.16)")
    setup = setup_for(scenario, pool)  # type: ignore[operator]
    args = setup.server_args
    assert capacity_module._eager_by_rule(COMMON, args, pool) == capacity_of(setup.runner).eager
    by_rule = capacity_module._ceil_align(COMMON, pool, capacity_module._graph_alignment(COMMON,
                                                                                         args))
    assert by_rule == capacity_of(setup.runner).graph


@pytest.mark.parametrize("scenario", ["dp-attention", "two-batch-overlap"])
def test_without_sglangs_functions_the_rule_is_used(
    scenario: str, setup_for: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup = setup_for(scenario, 33)  # type: ignore[operator]
    with_functions = capacity_of(setup.runner)
    for name in ("get_eager_max_batch_size", "get_cuda_graph_max_batch_size"):
        monkeypatch.delattr(COMMON, name, raising=False)
    by_rule = capacity_of(setup.runner)
    assert by_rule.source == "the MLP-sync rule + the graph-size rule"
    assert (by_rule.eager, by_rule.graph) == (with_functions.eager, with_functions.graph)


@pytest.mark.parametrize("missing", ["require_mlp_sync", "ceil_align"])
def test_a_release_without_the_rule_is_refused_by_name(
    missing: str, setup_for: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    setup = setup_for("dp-attention", 33)  # type: ignore[operator]
    for name in ("get_eager_max_batch_size", "get_cuda_graph_max_batch_size", missing):
        monkeypatch.delattr(COMMON, name, raising=False)
    with pytest.raises(BatchCapacityError, match=rf"no sglang\.srt\.utils\.common\.{missing}.*"
                                                 r"--attention-backend aiter"):
        capacity_of(setup.runner)


def test_the_backend_refuses_at_construction_not_per_step(
    setup_for: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglang_aiter_plugin.backend.classes import AiterExtAttnBackend

    setup = setup_for("dp-attention", 33)  # type: ignore[operator]
    for name in ("get_eager_max_batch_size", "require_mlp_sync"):
        monkeypatch.delattr(COMMON, name, raising=False)
    with pytest.raises(BatchCapacityError, match="require_mlp_sync"):
        AiterExtAttnBackend(setup.runner)


@pytest.mark.parametrize("topk", [1, 2])
def test_draft_wrapper_and_children_hold_the_capacity_from_construction(
    topk: int, setup_for: object
) -> None:
    from sglang_aiter_plugin.backend.classes import AiterExtMultiStepDraftBackend

    setup = setup_for("dp-attention", 33)  # type: ignore[operator]
    rows = capacity_of(setup.runner).rows
    assert rows == 34
    draft = AiterExtMultiStepDraftBackend(setup.runner, topk, 3)
    assert tuple(draft.kv_indptr.shape) == (3, rows * topk + 1)
    assert draft.buffer_pool.capacity == rows
    for step, child in enumerate(draft.attn_backends):
        assert child.buffer_pool.capacity == rows
        assert child.kv_last_page_len.shape[0] == rows
        assert child.kv_indptr.data_ptr() == draft.kv_indptr[step].data_ptr()
    assert not pool_frozen(draft.buffer_pool)


def test_a_frozen_kv_mtp_draft_worker_is_sized_for_its_topk_expansion(setup_for: object) -> None:
    """sglang's eager runner multiplies a frozen-KV MTP draft batch by top-k; so does the pool."""
    from types import SimpleNamespace

    setup = setup_for("plain", 33)  # type: ignore[operator]
    runner = setup.runner
    base = capacity_of(runner).rows
    runner.is_draft_worker = True
    runner.spec_algorithm = SimpleNamespace(is_frozen_kv_mtp=lambda: True)
    with contextlib.ExitStack() as scope:
        try:  # 0.5.17+: resolved configuration is read-only; state it where sglang reads it
            from sglang.srt.runtime_context import get_spec

            scope.enter_context(get_spec().override(speculative_eagle_topk=4))
        except (ImportError, AttributeError):
            setup.server_args.speculative_eagle_topk = 4
        expanded = capacity_of(runner).requests
    runner.is_draft_worker = False
    del runner.spec_algorithm
    assert base == 33
    assert expanded == 33 * 4
