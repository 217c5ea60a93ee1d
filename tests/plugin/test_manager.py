"""The fix registry: built-in fixes, third-party fixes, isolation of failures, re-entrancy."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest
from packaging.version import Version

from sglang_aiter_plugin import FixState, FixStatus
from sglang_aiter_plugin._switches import Switches
from sglang_aiter_plugin.plugin import hookimpl
from sglang_aiter_plugin.plugin.manager import PluginManager
from sglang_aiter_plugin.plugin.spec import FixContext, PoolResize

CONTEXT = FixContext(plugin_version="test", sglang_version=Version("0.5.23"))


class RecordingFix:
    def __init__(self, state: FixState = FixState.APPLIED) -> None:
        self.calls = 0
        self.state = state

    @hookimpl
    def aiter_ext_apply_fix(self, context: FixContext) -> FixStatus:
        self.calls += 1
        return FixStatus("whatever", self.state, f"sglang {context.sglang_version}")


class RaisingFix:
    @hookimpl
    def aiter_ext_apply_fix(self, context: FixContext) -> FixStatus:
        raise RuntimeError("probe exploded")


def test_builtin_fixes_come_first_in_a_fixed_order() -> None:
    pm = PluginManager(load_entrypoints=False)
    pm.register_fix("third", RecordingFix())
    assert pm.fix_names() == ["attention-backend", "capture-all-reduce", "capture-all-gather",
                              "capture-reduce-scatter", "capture-fused-ar-rmsnorm", "third"]


def test_a_raising_fix_fails_alone_and_status_uses_the_plugin_name() -> None:
    pm = PluginManager(load_entrypoints=False)
    good = RecordingFix()
    pm.register_fix("boom", RaisingFix())
    pm.register_fix("good", good)
    statuses = {s.name: s for s in pm.apply_fixes(CONTEXT, Switches())}
    assert statuses["boom"].state is FixState.FAILED
    assert statuses["boom"].detail == "RuntimeError: probe exploded"
    assert statuses["good"].state is FixState.APPLIED
    assert statuses["good"].detail == "sglang 0.5.23"
    assert good.calls == 1


def test_registration_is_reentrant() -> None:
    pm = PluginManager(load_entrypoints=False)
    fix = RecordingFix()
    pm.register_fix("once", fix)
    pm.register_fix("once", fix)
    pm.register_fix("once", RecordingFix())
    assert pm.fix_names().count("once") == 1


def test_switches_disable_without_calling() -> None:
    pm = PluginManager(load_entrypoints=False)
    fix = RecordingFix()
    pm.register_fix("mine", fix)
    statuses = pm.apply_fixes(CONTEXT, Switches(disabled_fixes=frozenset({"mine"})))
    assert {s.name: s.state for s in statuses}["mine"] is FixState.DISABLED
    off = pm.apply_fixes(CONTEXT, Switches(enabled=False))
    assert {s.state for s in off} == {FixState.DISABLED}
    assert fix.calls == 0


def test_a_fix_returning_garbage_is_reported_as_failed() -> None:
    class Garbage:
        @hookimpl
        def aiter_ext_apply_fix(self, context: FixContext) -> object:
            return "applied"

    pm = PluginManager(load_entrypoints=False)
    pm.register_fix("garbage", Garbage())
    status = {s.name: s for s in pm.apply_fixes(CONTEXT, Switches())}["garbage"]
    assert status.state is FixState.FAILED and "not a FixStatus" in status.detail


def test_resize_observers_are_called_with_the_event() -> None:
    seen: list[PoolResize] = []

    class Observer:
        @hookimpl
        def aiter_ext_pool_resized(self, event: PoolResize) -> None:
            seen.append(event)

    pm = PluginManager(load_entrypoints=False)
    pm.register_fix("observer", Observer())
    event = PoolResize(pool=None, owner=None, old_capacity=33, new_capacity=34, reason="test")
    pm.announce_resize(event)
    assert seen == [event]
    assert "observer" not in pm.fix_names()  # an observer is not a fix


@pytest.fixture
def third_party_dist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A real installed-style distribution (dist-info + module) on sys.path."""
    (tmp_path / "thirdparty_fix.py").write_text(textwrap.dedent("""
        from sglang_aiter_plugin import FixState, FixStatus
        from sglang_aiter_plugin.plugin import hookimpl

        @hookimpl
        def aiter_ext_apply_fix(context):
            return FixStatus("x", FixState.NOT_NEEDED, "third party says so")
    """))
    (tmp_path / "broken_fix.py").write_text("raise ImportError('missing dependency zzz')\n")
    info = tmp_path / "thirdparty_fix-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: thirdparty-fix\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[sglang_aiter_plugin.fixes]\nthird-party = thirdparty_fix\nbroken = broken_fix\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    sys.modules.pop("thirdparty_fix", None)


def test_third_party_fixes_come_from_the_entry_point_group(third_party_dist: Path) -> None:
    pm = PluginManager()
    statuses = {s.name: s for s in pm.apply_fixes(CONTEXT, Switches())}
    assert statuses["third-party"].state is FixState.NOT_NEEDED
    assert statuses["third-party"].detail == "third party says so"
    assert statuses["broken"].state is FixState.FAILED
    assert "missing dependency zzz" in statuses["broken"].detail
    assert statuses["attention-backend"].state is FixState.APPLIED
