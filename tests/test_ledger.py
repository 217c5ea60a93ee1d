"""The plugin's ledger, one format for every upstream defect it answers: each built-in fix's entry
and the backend's defects name the sglang symbols they touch, why, how, upstream and when they
step aside; ``docs/ledger.md`` renders them; tripwires run "steps aside"."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from sglang_aiter_plugin._ledger import Defect, markdown
from sglang_aiter_plugin.fixes import BUILTIN_FIXES, ledger_sections, load

ROOT = Path(__file__).resolve().parents[1]


def _entries() -> list[Defect]:
    return [d for _, entries in ledger_sections() for d in entries]


@pytest.mark.parametrize(("name", "value"), BUILTIN_FIXES)
def test_every_builtin_fix_has_its_ledger_entry_under_its_registry_name(
        name: str, value: str) -> None:
    entry = getattr(load(value), "ledger", None)
    assert isinstance(entry, Defect), f"{value}: no ledger entry"
    assert entry.name == name


def test_every_entry_is_complete_and_named_once() -> None:
    entries = _entries()
    assert len({d.name for d in entries}) == len(entries)
    for d in entries:
        assert all((d.summary, d.why, d.how, d.upstream, d.steps_aside)), d
        assert d.symbols(), f"{d.name}: no sglang symbol"
        assert len(d.symbols()) == len(d.patches), f"{d.name}: {d.patches}"


def test_the_ledger_page_is_rendered_from_the_entries() -> None:
    page = (ROOT / "docs" / "ledger.md").read_text()
    assert page == markdown(ledger_sections()), (
        "docs/ledger.md is stale: sglang-aiter-plugin ledger > docs/ledger.md")


def _attention_backend_ledger() -> Defect:
    from sglang_aiter_plugin.fixes.attention_backend import fix

    return fix.ledger


def test_the_attention_backend_ledger_names_every_site_the_fix_wraps() -> None:
    from sglang_aiter_plugin.fixes.attention_backend.fix import REGISTRY_MODULE
    from sglang_aiter_plugin.fixes.attention_backend.sites import (
        DRAFT_FACTORY_SITES,
        DRAFT_UTILS_MODULE,
    )

    named = _attention_backend_ledger().symbols()
    wrapped = {(REGISTRY_MODULE, "ATTENTION_BACKENDS['aiter']"),
               (REGISTRY_MODULE, "ATTENTION_BACKENDS['aiter-ext']"),
               *((DRAFT_UTILS_MODULE, f"DraftBackendFactory.{m}") for m in DRAFT_FACTORY_SITES)}
    assert wrapped <= set(named)


@pytest.mark.usefixtures("plugins_loaded")
def test_every_symbol_of_the_ledger_exists_in_the_installed_release() -> None:
    """The ledger names real symbols: a rename in sglang turns this red before users see it."""
    missing = []
    for d in _entries():
        for module_name, qualname in d.symbols():
            module = importlib.import_module(module_name)
            head, _, key = qualname.partition("[")
            obj: object = module
            for part in head.split("."):
                obj = getattr(obj, part, None)
            if key:
                obj = obj.get(key.rstrip("]").strip("'")) if isinstance(obj, dict) else None
            if obj is None and not d.release_specific((module_name, qualname)):
                missing.append(f"{d.name}: {module_name}:{qualname}")
    assert missing == []


@pytest.mark.usefixtures("plugins_loaded")
def test_the_release_specific_fold_point_exists_and_is_in_the_ledger() -> None:
    from sglang.srt.server_args import ServerArgs

    from sglang_aiter_plugin.fixes.attention_backend.choice import fold_point

    point = fold_point(ServerArgs)
    assert callable(getattr(ServerArgs, point))
    named = {qualname for _, qualname in _attention_backend_ledger().symbols()}
    assert f"ServerArgs.{point}" in named


# ---------------------------------------------------------------- the backend's ledger


def _defects() -> Any:
    from sglang_aiter_plugin.backend.defects import DEFECTS

    return DEFECTS


@pytest.mark.usefixtures("plugins_loaded")
def test_the_backend_ledger_names_each_defect_once_with_releases_upstream_and_remove_when() -> None:
    from sglang_aiter_plugin import _releases

    defects = _defects()
    assert len({d.name for d in defects}) == len(defects)
    tested = [Version(v) for v in _releases.TESTED]
    for d in defects:
        assert d.releases is not None, d
        first, _, last = d.releases.partition("-")
        assert Version(first) in tested, d
        if d.fixed_in is None:
            assert last == "", f"{d.name}: no fix upstream, so every release so far is affected"
            continue
        # the range ends on the tested release just before the one that fixes it
        assert Version(last) == max(v for v in tested if v < Version(d.fixed_in)), d


@pytest.mark.usefixtures("plugins_loaded")
def test_a_defect_every_supported_release_has_fixed_is_retired() -> None:
    """Remove when, made executable: once the oldest supported release has upstream's fix, the
    plugin's fix for it (and its ledger row) must go."""
    from sglang_aiter_plugin import _releases

    retired = [f"{d.name}: {d.steps_aside}" for d in _defects()
               if d.fixed_in is not None
               and Version(_releases.OLDEST_SUPPORTED) >= Version(d.fixed_in)]
    assert retired == []


def _affected(name: str, release: Version) -> bool:
    (d,) = [d for d in _defects() if d.name == name]
    return bool(d.affects(release))


@pytest.mark.usefixtures("plugins_loaded")
@pytest.mark.parametrize(("page", "unified", "defect"), [
    (16, "0", "kv-indices-per-page"),
    (1, "1", "unified-page-table"),
])
def test_each_fix_acts_exactly_on_the_releases_its_ledger_row_names(
    page: int, unified: str, defect: str, model_dir: Path, sglang_version: Version,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The tripwire: on the installed release the fix acts iff the ledger says upstream is wrong
    (its width and layout measured at graph set-up, not assumed from the version)."""
    from testkit.plugin_state import fills_page_table, widened_buffers
    from testkit.sglang_setup import SCENARIOS, configure

    monkeypatch.setenv("SGLANG_USE_AITER_UNIFIED_ATTN", unified)
    setup = configure(model_dir, SCENARIOS["two-batch-overlap"], ("--page-size", str(page)))
    with setup.scope, widened_buffers() as widened:
        from sglang_aiter_plugin.backend.classes import AiterExtAttnBackend

        backend = AiterExtAttnBackend(setup.runner)
        backend.init_cuda_graph_state(setup.max_bs, setup.max_bs)
    acted = {"kv-indices-per-page": "cuda_graph_kv_indices" in widened,  # at page size 16
             "unified-page-table": fills_page_table(backend)}[defect]
    assert acted == _affected(defect, sglang_version), widened


@pytest.mark.usefixtures("plugins_loaded")
@pytest.mark.parametrize(("page", "unified", "draft"), [(1, "1", False), (16, "0", False),
                                                         (1, "0", True)])
def test_graph_set_up_reports_by_the_ledgers_names_and_only_applied_where_it_acted(
    page: int, unified: str, draft: bool, model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every status graph set-up logs names a row of the ledger; ``applied`` rows come with work
    done (the pool holds more than upstream allocated, or the fill is installed)."""
    from testkit.plugin_state import fills_page_table
    from testkit.sglang_setup import SCENARIOS, configure

    monkeypatch.setenv("SGLANG_USE_AITER_UNIFIED_ATTN", unified)
    setup = configure(model_dir, SCENARIOS["two-batch-overlap"], ("--page-size", str(page)))
    with setup.scope:
        from sglang_aiter_plugin.backend.classes import (
            AiterExtAttnBackend,
            AiterExtMultiStepDraftBackend,
        )

        backend = (AiterExtMultiStepDraftBackend(setup.runner, 1, 3) if draft
                   else AiterExtAttnBackend(setup.runner))
        backend.init_cuda_graph_state(setup.max_bs, setup.max_bs)
    states = {s.name: s.state.value for s in backend.graph_fixes}
    assert set(states) <= {d.name for d in _defects()}, states
    assert states.pop("draft-kv-indptr" if draft else "rows") == "applied"  # 33 -> 34 rows
    assert backend.buffer_pool.bytes_beyond_handed() > 0
    assert states.get("unified-page-table") == ("applied" if fills_page_table(backend) else None)
