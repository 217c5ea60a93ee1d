"""The fix registry: order, isolation of failures, blocking, duplicate names, observers."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
from packaging.version import Version

from sglang_aiter_plugin import FixState, FixStatus
from sglang_aiter_plugin.fixes import BUILTIN_FIXES
from sglang_aiter_plugin.plugin import FIXES_GROUP
from sglang_aiter_plugin.plugin.manager import FixSource, PluginManager, fix_sources
from sglang_aiter_plugin.plugin.spec import FixContext, PoolResize
from testkit.distributions import write_distribution
from testkit.plugins import off_rocm_process

CONTEXT = FixContext(plugin_version="test", sglang_version=Version("0.5.23"))
BUILTIN_NAMES = [name for name, _ in BUILTIN_FIXES]

FIX_SOURCES = {
    "tpf_good": """
        from sglang_aiter_plugin import FixState, FixStatus
        from sglang_aiter_plugin.plugin import hookimpl
        calls = []

        @hookimpl
        def aiter_ext_apply_fix(context):
            calls.append(context)
            return FixStatus("ignored", FixState.APPLIED, f"sglang {context.sglang_version}")
    """,
    "tpf_raising": """
        from sglang_aiter_plugin.plugin import hookimpl

        @hookimpl
        def aiter_ext_apply_fix(context):
            raise RuntimeError("probe exploded")
    """,
    "tpf_garbage": """
        from sglang_aiter_plugin.plugin import hookimpl

        @hookimpl
        def aiter_ext_apply_fix(context):
            return "applied"
    """,
    "tpf_unimportable": "raise ImportError('missing dependency zzz')\n",
    "tpf_misnamed": """
        from sglang_aiter_plugin import FixState, FixStatus
        from sglang_aiter_plugin.plugin import hookimpl

        @hookimpl
        def apply_fix(context):
            return FixStatus("misnamed", FixState.APPLIED, "never called")
    """,
    "tpf_observer": """
        from sglang_aiter_plugin.plugin import hookimpl
        events = []

        @hookimpl
        def aiter_ext_pool_resized(event):
            events.append(event)
    """,
}


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The third-party fix modules above, importable, and forgotten after the test."""
    import textwrap

    for name, source in FIX_SOURCES.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in FIX_SOURCES:
        sys.modules.pop(name, None)


def _third_party(name: str, module: str) -> FixSource:
    return FixSource.third_party(EntryPoint(name, module, FIXES_GROUP))


def _builtin_sources() -> list[FixSource]:
    return [FixSource.builtin(name, value) for name, value in BUILTIN_FIXES]


def _statuses(manager: PluginManager) -> dict[str, FixStatus]:
    return {s.name: s for s in manager.apply_fixes(CONTEXT)}


@pytest.mark.usefixtures("modules")
def test_builtin_fixes_come_first_then_third_party_in_entry_point_order() -> None:
    manager = PluginManager([*_builtin_sources(), _third_party("b", "tpf_good"),
                             _third_party("a", "tpf_observer")])
    assert [name for name, _ in manager.pluggy.list_name_plugin()] == [*BUILTIN_NAMES, "b", "a"]


@pytest.mark.usefixtures("modules")
def test_a_raising_fix_fails_alone_and_its_status_carries_the_plugin_name() -> None:
    manager = PluginManager([_third_party("boom", "tpf_raising"), _third_party("good", "tpf_good")])
    statuses = _statuses(manager)
    assert statuses["boom"].state is FixState.FAILED
    assert statuses["boom"].detail == "RuntimeError: probe exploded"
    assert statuses["good"] == FixStatus("good", FixState.APPLIED, "sglang 0.5.23")
    assert len(sys.modules["tpf_good"].calls) == 1


@pytest.mark.usefixtures("modules")
def test_a_fix_that_cannot_be_imported_or_returns_garbage_is_failed() -> None:
    manager = PluginManager([_third_party("gone", "tpf_unimportable"),
                             _third_party("garbage", "tpf_garbage")])
    statuses = _statuses(manager)
    assert statuses["gone"].state is FixState.FAILED
    assert "cannot load tpf_unimportable" in statuses["gone"].detail
    assert "missing dependency zzz" in statuses["gone"].detail
    assert statuses["garbage"].state is FixState.FAILED
    assert "not a FixStatus" in statuses["garbage"].detail


@pytest.mark.usefixtures("modules")
def test_a_fix_that_implements_no_hook_is_failed_and_named_so() -> None:
    """Hooks are found by their ``aiter_ext_`` name only: a marked function named otherwise is not
    one, and a plugin left with none is a failure that says how to name them."""
    manager = PluginManager([_third_party("misnamed", "tpf_misnamed"),
                             _third_party("good", "tpf_good")])
    statuses = _statuses(manager)
    assert statuses["misnamed"].state is FixState.FAILED
    assert "implements no hook" in statuses["misnamed"].detail
    assert "aiter_ext_apply_fix or aiter_ext_pool_resized" in statuses["misnamed"].detail
    assert statuses["good"].state is FixState.APPLIED
    assert manager.pluggy.get_plugin("misnamed") is None


@pytest.mark.usefixtures("modules")
def test_a_blocked_fix_is_reported_disabled_and_never_imported() -> None:
    manager = PluginManager([_third_party("raising", "tpf_raising"),
                             _third_party("good", "tpf_good")], blocked={"raising"})
    assert "tpf_raising" not in sys.modules
    assert manager.pluggy.is_blocked("raising")
    statuses = _statuses(manager)
    assert statuses["raising"].state is FixState.DISABLED
    assert "SGLANG_AITER_EXT_DISABLE" in statuses["raising"].detail
    assert "tpf_raising" not in sys.modules
    assert statuses["good"].state is FixState.APPLIED


def test_a_disabled_builtin_fix_is_not_imported_by_register() -> None:
    data = off_rocm_process()  # SGLANG_AITER_EXT_DISABLE=attention-backend
    assert "sglang_aiter_plugin.selection.fix" not in data["imported"]
    assert data["statuses"]["attention-backend"][0] == "disabled"
    assert "sglang_aiter_plugin._registration" in data["imported"]  # the plugin did load


def test_duplicate_fix_names_are_reported_and_the_first_one_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = FIX_SOURCES["tpf_good"]
    write_distribution(tmp_path / "one", "dup-one", modules={"dup_one": good},
                       entry_points={FIXES_GROUP: {"dup": "dup_one",
                                                   BUILTIN_NAMES[0]: "dup_one"}})
    write_distribution(tmp_path / "two", "dup-two", modules={"dup_two": good},
                       entry_points={FIXES_GROUP: {"dup": "dup_two"}})
    monkeypatch.syspath_prepend(str(tmp_path / "two"))
    monkeypatch.syspath_prepend(str(tmp_path / "one"))
    sources, problems = fix_sources()
    names = [s.name for s in sources]
    assert names.count("dup") == 1
    assert names.count(BUILTIN_NAMES[0]) == 1
    assert next(s for s in sources if s.name == BUILTIN_NAMES[0]).origin.startswith("built-in ")
    reported = {p.name: p for p in problems}
    assert set(reported) >= {"dup (duplicate)", f"{BUILTIN_NAMES[0]} (duplicate)"}
    assert "already taken by built-in" in reported[f"{BUILTIN_NAMES[0]} (duplicate)"].detail
    dup = reported["dup (duplicate)"].detail
    assert "(from dup-two)" in dup
    assert "already taken by dup_one (from dup-one)" in dup
    for problem in problems:
        assert problem.state is FixState.FAILED
    # the names that were kept still apply: the built-in fix and the first "dup"
    kept = [s for s in sources if s.name in ("dup", BUILTIN_NAMES[0])]
    statuses = _statuses(PluginManager(kept, problems=problems))
    assert statuses["dup"].state is FixState.APPLIED
    assert statuses[BUILTIN_NAMES[0]].state is not FixState.FAILED
    assert statuses["dup (duplicate)"].state is FixState.FAILED
    sys.modules.pop("dup_one", None)


def test_the_fixes_group_is_found_as_importlib_metadata_finds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reader agrees with ``entry_points(group=...)``: folders on ``sys.path`` (one
    without ``entry_points.txt``) and a distribution that is not a folder (a finder's own)."""
    import importlib.metadata as md

    from sglang_aiter_plugin.plugin.manager import _entry_points

    write_distribution(tmp_path / "one", "lean-one", modules={},
                       entry_points={FIXES_GROUP: {"lean-a": "lean_one"}, "other": {"x": "y"}})
    (tmp_path / "two" / "lean_two-1.0.dist-info").mkdir(parents=True)
    (tmp_path / "two" / "lean_two-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: lean-two\nVersion: 1.0\n")

    files = {"METADATA": "Metadata-Version: 2.1\nName: lean-mem\nVersion: 1.0\n",
             "entry_points.txt": f"[{FIXES_GROUP}]\nlean-m = lean_mem\n"}

    class InMemory(md.Distribution):
        def read_text(self, filename: str) -> str | None:
            return files.get(filename)

        def locate_file(self, path: object) -> Path:
            raise NotImplementedError

    class Finder:
        @staticmethod
        def find_spec(*args: object) -> None:
            return None

        @staticmethod
        def find_distributions(context: object = None) -> list[md.Distribution]:
            return [InMemory()]

    monkeypatch.syspath_prepend(str(tmp_path / "two"))
    monkeypatch.syspath_prepend(str(tmp_path / "one"))
    monkeypatch.setattr(sys, "meta_path", [*sys.meta_path, Finder()])
    found = [(ep.name, ep.value) for ep in _entry_points(FIXES_GROUP)]
    assert ("lean-a", "lean_one") in found
    assert ("lean-m", "lean_mem") in found
    assert found == [(ep.name, ep.value) for ep in md.entry_points(group=FIXES_GROUP)]


def test_a_later_report_is_always_filed_under_the_fixs_own_name() -> None:
    from sglang_aiter_plugin.plugin.manager import _call_fix

    reported: list[FixStatus] = []

    def fix(context: FixContext) -> FixStatus:
        context.report(FixStatus("attention-backend", FixState.APPLIED, "not mine to say"))
        return FixStatus("whatever", FixState.PENDING, "waiting", waiting_for=("m",))

    context = FixContext(plugin_version="t", sglang_version=None, report=reported.append)
    status = _call_fix("third", fix, context)
    assert [r.name for r in reported] == ["third"]
    assert status.name == "third"
    assert status.waiting_for == ("m",)


@pytest.mark.usefixtures("modules")
def test_resize_observers_are_told_and_are_not_fixes() -> None:
    manager = PluginManager([_third_party("observer", "tpf_observer")])
    event = PoolResize(pool=None, owner=None, old_capacity=33, new_capacity=34, reason="test")
    manager.announce_resize(event)
    assert sys.modules["tpf_observer"].events == [event]
    assert "observer" not in _statuses(manager)
