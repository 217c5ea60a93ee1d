"""What the README tells users that code can contradict: switch values and doctor's exit status."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sglang_aiter_plugin import _doctor
from sglang_aiter_plugin._switches import ENABLE_VAR, read_switches

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


def _spellings() -> tuple[set[str], set[str]]:
    """The values the README says mean on and off."""
    sentence = re.search(r"`1` may also be written (.+?)\(any case\)", README, re.S)
    assert sentence is not None, "the README no longer says how switch values may be written"
    on_text, off_text = sentence.group(1).split(", and `0` as ")
    return {"1", *re.findall(r"`([^`]+)`", on_text)}, {"0", *re.findall(r"`([^`]+)`", off_text)}


def test_the_readme_lists_exactly_the_switch_values_the_plugin_accepts() -> None:
    on, off = _spellings()
    for value in on | {v.upper() for v in on}:
        assert read_switches([], {ENABLE_VAR: value}).enabled is True, value
    for value in off | {v.upper() for v in off}:
        assert read_switches([], {ENABLE_VAR: value}).enabled is False, value
    problems = read_switches([], {ENABLE_VAR: "maybe"}).problems
    assert len(problems) == 1
    accepted = set(problems[0].split("accepted values: ", 1)[1].split(" (", 1)[0].split(", "))
    assert accepted == on | off  # nothing accepted that the README does not list


def test_every_switch_in_the_code_is_in_the_readme_table() -> None:
    from sglang_aiter_plugin import _switches

    names = {v for k, v in vars(_switches).items() if k.endswith("_VAR") and isinstance(v, str)}
    assert names
    table = {m for m in re.findall(r"^\| `([A-Z_]+)`", README, re.M)}
    assert names <= table


@pytest.mark.parametrize(
    ("levels", "code"),
    [((_doctor.OK, _doctor.INFO), 0), ((_doctor.OK, _doctor.WARN), 0),
     ((_doctor.OK, _doctor.FAIL), 1), ((_doctor.WARN, _doctor.FAIL, _doctor.INFO), 1)],
)
def test_doctor_exits_as_the_readme_says(levels: tuple[str, ...], code: int) -> None:
    said = "Exit status: 1 when any row says `FAIL`, else 0** (`warn` rows do not change it)"
    assert said in " ".join(README.split())
    report = _doctor.Report()
    for i, level in enumerate(levels):
        report.add(f"check {i}", level, "text")
    assert report.exit_code == code
