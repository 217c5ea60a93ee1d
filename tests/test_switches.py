"""Parsing of SGLANG_AITER_EXT and SGLANG_AITER_EXT_DISABLE."""

from __future__ import annotations

import pytest

from sglang_aiter_plugin._switches import read_switches

KNOWN = ["attention-backend", "reduce-scatter-tms"]


@pytest.mark.parametrize("value", ["", "1", "true", "YES", " on "])
def test_enabled_values(value: str) -> None:
    s = read_switches(KNOWN, {"SGLANG_AITER_EXT": value})
    assert s.enabled and not s.problems


@pytest.mark.parametrize("value", ["0", "false", "No", "OFF"])
def test_disabled_values(value: str) -> None:
    s = read_switches(KNOWN, {"SGLANG_AITER_EXT": value})
    assert not s.enabled and not s.problems


@pytest.mark.parametrize("value", ["2", "maybe", "disable", "0x0"])
def test_garbage_keeps_default_and_names_variable_value_and_choices(value: str) -> None:
    s = read_switches(KNOWN, {"SGLANG_AITER_EXT": value})
    assert s.enabled
    (problem,) = s.problems
    assert f"SGLANG_AITER_EXT={value!r}" in problem
    assert "accepted values: 1, true, yes, on, 0, false, no, off" in problem


def test_disable_list_parses_names_and_reports_unknown_ones() -> None:
    s = read_switches(KNOWN, {"SGLANG_AITER_EXT_DISABLE": " reduce-scatter-tms, ,bogus,"})
    assert s.disabled_fixes == {"reduce-scatter-tms"}
    (problem,) = s.problems
    assert "'bogus'" in problem and "attention-backend, reduce-scatter-tms" in problem
