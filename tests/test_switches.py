"""Parsing of SGLANG_AITER_EXT and SGLANG_AITER_EXT_DISABLE."""

from __future__ import annotations

import pytest

from sglang_aiter_plugin._switches import SwitchValueError, bounds_check_requested, read_switches

KNOWN = ["attention-backend", "capture-reduce-scatter"]


@pytest.mark.parametrize("value", ["", "1", "true", "YES", " on "])
def test_enabled_values(value: str) -> None:
    s = read_switches(KNOWN, {"SGLANG_AITER_EXT": value})
    assert s.enabled
    assert not s.problems


@pytest.mark.parametrize("value", ["0", "false", "No", "OFF"])
def test_disabled_values(value: str) -> None:
    s = read_switches(KNOWN, {"SGLANG_AITER_EXT": value})
    assert not s.enabled
    assert not s.problems


@pytest.mark.parametrize("value", ["2", "maybe", "disable", "0x0"])
def test_garbage_keeps_default_and_names_variable_value_and_choices(value: str) -> None:
    s = read_switches(KNOWN, {"SGLANG_AITER_EXT": value})
    assert s.enabled
    (problem,) = s.problems
    assert f"SGLANG_AITER_EXT={value!r}" in problem
    assert "accepted values: 1, true, yes, on, 0, false, no, off" in problem


def test_disable_list_parses_names_and_reports_unknown_ones() -> None:
    s = read_switches(KNOWN, {"SGLANG_AITER_EXT_DISABLE": " capture-reduce-scatter, ,bogus,"})
    assert s.disabled_fixes == {"capture-reduce-scatter"}
    (problem,) = s.problems
    assert "'bogus'" in problem
    assert "attention-backend, capture-reduce-scatter" in problem


@pytest.mark.parametrize(("value", "want"), [("", False), ("0", False), ("1", True), ("On", True)])
def test_bounds_check_values(value: str, want: bool) -> None:
    s = read_switches(KNOWN, {"SGLANG_AITER_EXT_BOUNDS_CHECK": value})
    assert s.bounds_check is want
    assert not s.problems
    assert bounds_check_requested({"SGLANG_AITER_EXT_BOUNDS_CHECK": value}) is want


def test_bounds_check_garbage_is_a_problem_at_load_and_an_error_for_the_backend() -> None:
    env = {"SGLANG_AITER_EXT_BOUNDS_CHECK": "always"}
    s = read_switches(KNOWN, env)
    assert s.enabled
    assert not s.bounds_check
    (problem,) = s.problems
    assert "SGLANG_AITER_EXT_BOUNDS_CHECK='always'" in problem
    assert "accepted values" in problem
    assert "an aiter-ext backend will refuse it" in problem
    with pytest.raises(SwitchValueError, match="SGLANG_AITER_EXT_BOUNDS_CHECK='always'"):
        bounds_check_requested(env)


def test_huge_values_give_short_problems() -> None:
    """What a user may paste by mistake: one bounded problem per variable."""
    names = ",".join(f"nope{i}" for i in range(5000))
    s = read_switches(KNOWN, {"SGLANG_AITER_EXT": "y" * 100_000, "SGLANG_AITER_EXT_DISABLE": names})
    enable, disable = s.problems
    assert enable.startswith("SGLANG_AITER_EXT='yyyy")
    assert "(100,000 characters in all)" in enable
    assert "5,000 unknown fixes: 'nope0', 'nope1', 'nope2', 'nope3', 'nope4' and 4,995 more" in (
        disable)
    assert max(len(enable), len(disable)) < 400


RETIRED = {"capture-old": "sglang does it itself"}


@pytest.fixture
def retired() -> str:
    """A fix name retired with a reason (none is retired today: ``capture-all-reduce``, retired
    once, is a fix again); the tests pass :data:`RETIRED` as the registry does."""
    return "capture-old"


def test_a_retired_fix_name_is_accepted_and_noted_once(retired: str) -> None:
    """A name that was a fix once: a user who still lists it did nothing wrong."""
    s = read_switches(KNOWN, {"SGLANG_AITER_EXT_DISABLE": f"{retired}, {retired}"}, RETIRED)
    assert not s.problems
    assert s.disabled_fixes == frozenset()
    (note,) = s.notes
    assert note == (f"{retired} (in SGLANG_AITER_EXT_DISABLE) is no longer a fix: sglang does "
                    "it itself, so there is nothing to disable")


def test_a_retired_fix_name_beside_an_unknown_one_leaves_only_the_unknown_a_problem(
        retired: str) -> None:
    s = read_switches(KNOWN, {"SGLANG_AITER_EXT_DISABLE": f"{retired},bogus"}, RETIRED)
    (problem,) = s.problems
    assert "unknown fix 'bogus'" in problem
    assert retired not in problem
    assert len(s.notes) == 1


def test_capture_all_reduce_is_a_fix_again() -> None:
    from sglang_aiter_plugin.fixes import retired_reasons

    assert "capture-all-reduce" not in retired_reasons()
    s = read_switches([*KNOWN, "capture-all-reduce"],
                      {"SGLANG_AITER_EXT_DISABLE": "capture-all-reduce"})
    assert (s.problems, s.notes, s.disabled_fixes) == ((), (), frozenset({"capture-all-reduce"}))
