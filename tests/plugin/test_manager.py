"""The fix registry: every built-in fix a pluggy plugin, in order, failures isolated, blocking."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.version import Version

from sglang_aiter_plugin import FixState, FixStatus
from sglang_aiter_plugin.fixes import BUILTIN_FIXES, load, name_of
from sglang_aiter_plugin.plugin.manager import PluginManager
from sglang_aiter_plugin.plugin.spec import FixContext
from testkit.plugins import off_rocm_process

CONTEXT = FixContext(sglang_version=Version("0.5.23"))
BUILTIN_NAMES = [name for name, _ in BUILTIN_FIXES]

FIX_SOURCES = {
    "tpf_good": """
        from sglang_aiter_plugin import FixState, FixStatus
        from sglang_aiter_plugin.plugin.spec import hookimpl
        calls = []

        @hookimpl
        def aiter_ext_apply_fix(context):
            calls.append(context)
            return FixStatus("ignored", FixState.APPLIED, f"sglang {context.sglang_version}")
    """,
    "tpf_raising": """
        from sglang_aiter_plugin.plugin.spec import hookimpl

        @hookimpl
        def aiter_ext_apply_fix(context):
            raise RuntimeError("probe exploded")
    """,
    "tpf_garbage": """
        from sglang_aiter_plugin.plugin.spec import hookimpl

        @hookimpl
        def aiter_ext_apply_fix(context):
            return "applied"
    """,
    "tpf_unimportable": "raise ImportError('missing dependency zzz')\n",
    "tpf_no_hook": """
        from sglang_aiter_plugin import FixState, FixStatus

        def apply_fix(context):
            return FixStatus("ignored", FixState.APPLIED, "never called")
    """,
    "tpf_unmarked": """
        from sglang_aiter_plugin import FixState, FixStatus

        def aiter_ext_apply_fix(context):
            return FixStatus("ignored", FixState.APPLIED, "never called")
    """,
}


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The fix modules above, importable, and forgotten after the test."""
    import textwrap

    for name, source in FIX_SOURCES.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in FIX_SOURCES:
        sys.modules.pop(name, None)


def _statuses(manager: PluginManager) -> dict[str, FixStatus]:
    return {s.name: s for s in manager.apply_fixes(CONTEXT)}


def test_every_builtin_fix_is_a_plugin_implementing_the_hook_in_order() -> None:
    manager = PluginManager(BUILTIN_FIXES)
    assert [name for name, _ in manager.pluggy.list_name_plugin()] == BUILTIN_NAMES
    impls = manager.pluggy.hook.aiter_ext_apply_fix.get_hookimpls()
    assert sorted(i.plugin_name for i in impls) == sorted(BUILTIN_NAMES)


def test_only_hook_names_are_looked_at_on_a_fix() -> None:
    """pluggy reads no attribute of a fix but its ``aiter_ext_`` ones: a fix object's properties
    (which may need sglang) are never evaluated at registration."""
    from sglang_aiter_plugin.plugin.spec import hookimpl

    class Fix:
        @property
        def expensive(self) -> None:
            raise AssertionError("read at registration")

        @hookimpl
        def aiter_ext_apply_fix(self, context: FixContext) -> FixStatus:
            return FixStatus("x", FixState.APPLIED, "ok")

    sys.modules["tpf_object"] = type(sys)("tpf_object")
    sys.modules["tpf_object"].FIX = Fix()  # type: ignore[attr-defined]
    try:
        statuses = _statuses(PluginManager([("object", "tpf_object:FIX")]))
    finally:
        del sys.modules["tpf_object"]
    assert statuses == {"object": FixStatus("object", FixState.APPLIED, "ok")}


@pytest.mark.usefixtures("modules")
def test_a_raising_fix_fails_alone_and_its_status_carries_the_fix_name() -> None:
    manager = PluginManager([("boom", "tpf_raising"), ("good", "tpf_good")])
    statuses = _statuses(manager)
    assert statuses["boom"].state is FixState.FAILED
    assert statuses["boom"].detail == "RuntimeError: probe exploded"
    assert statuses["good"] == FixStatus("good", FixState.APPLIED, "sglang 0.5.23")
    assert len(sys.modules["tpf_good"].calls) == 1


@pytest.mark.usefixtures("modules")
def test_a_fix_that_cannot_be_imported_or_returns_garbage_is_failed() -> None:
    manager = PluginManager([("garbage", "tpf_garbage"), ("gone", "tpf_unimportable")])
    assert [s.name for s in manager.apply_fixes(CONTEXT)] == ["garbage", "gone"]
    statuses = _statuses(manager)
    assert statuses["gone"] == FixStatus("gone", FixState.FAILED, "cannot load built-in "
                                         "tpf_unimportable: ImportError: missing dependency zzz")
    assert statuses["garbage"].state is FixState.FAILED
    assert "not a FixStatus" in statuses["garbage"].detail


@pytest.mark.usefixtures("modules")
def test_a_fix_without_its_hook_implementation_is_failed_with_the_reason_in_order() -> None:
    """A fix module that defines no ``aiter_ext_apply_fix``, or one not marked ``@hookimpl``,
    would do nothing: it is ``failed``, saying why, in the registry's place, and pluggy holds
    nothing of it."""
    manager = PluginManager([("good", "tpf_good"), ("none", "tpf_no_hook"),
                             ("unmarked", "tpf_unmarked")])
    statuses = manager.apply_fixes(CONTEXT)
    assert [(s.name, s.state) for s in statuses] == [
        ("good", FixState.APPLIED), ("none", FixState.FAILED), ("unmarked", FixState.FAILED)]
    assert statuses[1].detail == ("cannot apply built-in tpf_no_hook: it has no "
                                  "aiter_ext_apply_fix marked @hookimpl")
    assert statuses[2].detail == ("cannot apply built-in tpf_unmarked: it has no "
                                  "aiter_ext_apply_fix marked @hookimpl")
    assert [name for name, _ in manager.pluggy.list_name_plugin()] == ["good"]


@pytest.mark.usefixtures("modules")
def test_a_blocked_fix_is_reported_disabled_and_never_imported() -> None:
    manager = PluginManager([("raising", "tpf_raising"), ("good", "tpf_good")],
                            blocked={"raising": "listed in SGLANG_AITER_EXT_DISABLE"})
    assert "tpf_raising" not in sys.modules
    assert manager.pluggy.is_blocked("raising")
    statuses = _statuses(manager)
    assert statuses["raising"] == FixStatus("raising", FixState.DISABLED,
                                            "listed in SGLANG_AITER_EXT_DISABLE")
    assert "tpf_raising" not in sys.modules
    assert statuses["good"].state is FixState.APPLIED


def test_a_disabled_builtin_fix_is_not_imported_by_register() -> None:
    data = off_rocm_process()  # SGLANG_AITER_EXT_DISABLE=attention-backend
    assert "sglang_aiter_plugin.fixes.attention_backend.fix" not in data["imported"]
    assert data["statuses"]["attention-backend"][0] == "disabled"
    assert "sglang_aiter_plugin._registration" in data["imported"]  # the plugin did load


def test_load_reads_a_module_or_an_object_in_it() -> None:
    from sglang_aiter_plugin.fixes.attention_backend import fix

    assert load("sglang_aiter_plugin.fixes.attention_backend.fix") is fix
    module = "sglang_aiter_plugin.fixes.attention_backend.fix"
    assert load(f"{module}:FIX_NAME") == name_of(module)  # the fix's module and its entry agree


def test_a_later_report_is_always_filed_under_the_fixs_own_name() -> None:
    from sglang_aiter_plugin.plugin.manager import _call_fix

    reported: list[FixStatus] = []

    def fix(context: FixContext) -> FixStatus:
        context.report(FixStatus("attention-backend", FixState.APPLIED, "not mine to say"))
        return FixStatus("whatever", FixState.PENDING, "waiting", waiting_for=("m",))

    context = FixContext(sglang_version=None, report=reported.append)
    status = _call_fix("third", fix, context)
    assert [r.name for r in reported] == ["third"]
    assert status.name == "third"
    assert status.waiting_for == ("m",)


@pytest.mark.usefixtures("modules")
def test_every_fix_is_called_through_pluggys_hook_call_in_the_registrys_order() -> None:
    """One hook call reaches every fix (the guard keeps a raising one from stopping pluggy's
    loop); pluggy calls the last registered first, the statuses keep the registry's order."""
    manager = PluginManager([("boom", "tpf_raising"), ("good", "tpf_good"),
                             ("garbage", "tpf_garbage")])
    calls: list[tuple[str, list[str]]] = []
    manager.pluggy.add_hookcall_monitoring(
        lambda hook, impls, kwargs: calls.append((hook, [i.plugin_name for i in impls])),
        lambda outcome, hook, impls, kwargs: None)
    statuses = manager.apply_fixes(CONTEXT)
    assert calls == [("aiter_ext_apply_fix", ["boom", "good", "garbage"])]
    assert [(s.name, s.state) for s in statuses] == [
        ("boom", FixState.FAILED), ("good", FixState.APPLIED), ("garbage", FixState.FAILED)]
