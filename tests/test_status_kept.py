"""Each status is kept as the fix reported it, on every route to the log and this process's
statuses: the one a fix returns, the one it reports later, and the one graph set-up decides."""

from __future__ import annotations

import logging
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from sglang_aiter_plugin import FixState, FixStatus, _registration
from sglang_aiter_plugin.backend.graph_state import outcome

STATES = list(FixState)

FIXES = """
from sglang_aiter_plugin import FixState, FixStatus
from sglang_aiter_plugin.plugin.spec import hookimpl

reports = {}

class Fix:
    def __init__(self, state):
        self.state = FixState(state)

    @hookimpl
    def aiter_ext_apply_fix(self, context):
        reports[self.state] = context.report
        return FixStatus("any name", self.state, f"as reported: {self.state.value}",
                         waiting_for=("m",) if self.state is FixState.PENDING else ())

""" + "".join(f"FIX_{i} = Fix({s.value!r})\n" for i, s in enumerate(STATES))


@pytest.fixture
def fixes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """One fix per state, registered in place of the built-in ones, in a fresh registration."""
    (tmp_path / "tsk_fixes.py").write_text(textwrap.dedent(FIXES))
    monkeypatch.syspath_prepend(str(tmp_path))
    names = tuple((f"fix-{s.name.lower()}", f"tsk_fixes:FIX_{i}") for i, s in enumerate(STATES))
    monkeypatch.setattr(_registration, "BUILTIN_FIXES", names)
    monkeypatch.setattr(_registration, "_switches", None)
    monkeypatch.delenv("SGLANG_AITER_EXT", raising=False)
    monkeypatch.delenv("SGLANG_AITER_EXT_DISABLE", raising=False)
    yield sys.modules.get("tsk_fixes")
    sys.modules.pop("tsk_fixes", None)


def test_a_returned_status_is_kept_in_order_under_the_fixs_name(fixes: object) -> None:
    _, statuses = _registration.run_fixes()
    assert [(s.name, s.state, s.detail) for s in statuses] == [
        (f"fix-{s.name.lower()}", s, f"as reported: {s.value}") for s in STATES]
    assert _registration.last_statuses() == statuses


@pytest.mark.parametrize("state", STATES, ids=[s.name.lower() for s in STATES])
def test_a_later_status_is_kept_and_logged_as_reported(
        fixes: object, state: FixState, caplog: pytest.LogCaptureFixture) -> None:
    _registration.run_fixes()
    module = sys.modules["tsk_fixes"]
    report = module.reports[FixState.PENDING]  # the pending fix reports its outcome
    with caplog.at_level(logging.DEBUG, logger="sglang_aiter_plugin"):
        report(FixStatus("ignored", state, f"later: {state.value}"))
    statuses = {s.name: s for s in _registration.last_statuses() or []}
    assert (statuses["fix-pending"].state, statuses["fix-pending"].detail) == (
        state, f"later: {state.value}")
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    if state is FixState.PENDING:  # not final yet: nothing to say
        assert lines == []
    else:
        level = logging.WARNING if state is FixState.FAILED else logging.INFO
        assert lines == [(level, f"sglang-aiter-plugin: fix-pending={state.value} "
                                 f"(later: {state.value})")]


def test_graph_set_up_says_applied_only_where_it_acted() -> None:
    assert outcome("rows", True, "did", "upstream does") == FixStatus(
        "rows", FixState.APPLIED, "did")
    assert outcome("rows", False, "did", "upstream does") == FixStatus(
        "rows", FixState.NOT_NEEDED, "upstream does")


@pytest.mark.usefixtures("plugins_loaded")
def test_graph_set_ups_statuses_take_the_one_route_to_the_log_and_the_statuses(
        model_dir: Path) -> None:
    """Graph set-up reports through the same route as a fix's later outcome: one log line, and
    the statuses of this process."""
    from sglang_aiter_plugin import _status
    from sglang_aiter_plugin._log import logger
    from testkit.sglang_setup import SCENARIOS, configure

    _registration.run_fixes()
    setup = configure(model_dir, SCENARIOS["two-batch-overlap"])
    records: list[logging.LogRecord] = []
    handler = logging.Handler(logging.INFO)  # sglang's logging set-up replaces the root's
    handler.emit = records.append  # type: ignore[method-assign,assignment]
    logger.addHandler(handler)
    try:
        with setup.scope:
            from sglang_aiter_plugin.backend.classes import AiterExtAttnBackend

            backend = AiterExtAttnBackend(setup.runner)
            backend.init_cuda_graph_state(setup.max_bs, setup.max_bs)
    finally:
        logger.removeHandler(handler)
    (rows,) = [s for s in backend.graph_fixes if s.name == "rows"]
    assert rows.state is FixState.APPLIED  # 33 -> 34 rows
    assert {s.name: s for s in _status.current() or []}["rows"] == rows
    (line,) = [r.getMessage() for r in records if "init_cuda_graph_state" in r.getMessage()]
    assert line == (f"sglang-aiter-plugin: AiterExtAttnBackend.init_cuda_graph_state(max_bs="
                    f"{setup.max_bs}): " + "; ".join(map(str, backend.graph_fixes)))
