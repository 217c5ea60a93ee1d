"""``FixStatus``: a value that fixes report, the log line and ``doctor`` show."""

from __future__ import annotations

import copy
import pickle

import pytest

from sglang_aiter_plugin import FixState, FixStatus


def test_statuses_compare_and_hash_by_value() -> None:
    a = FixStatus("f", FixState.PENDING, "waits", waiting_for=("m",))
    b = FixStatus("f", FixState.PENDING, "waits", waiting_for=("m",))
    assert a == b
    assert hash(a) == hash(b)
    assert a != a._replace(detail="other")
    assert len({a, b}) == 1


def test_a_status_cannot_be_changed_in_place() -> None:
    status = FixStatus("f", FixState.APPLIED)
    with pytest.raises(AttributeError):
        status.state = FixState.FAILED  # type: ignore[misc]
    assert status.state is FixState.APPLIED


def test_replace_changes_only_the_named_fields_and_refuses_unknown_ones() -> None:
    status = FixStatus("f", FixState.PENDING, "waits", waiting_for=("m",))
    renamed = status._replace(name="g")
    assert (renamed.name, renamed.state, renamed.detail, renamed.waiting_for) == (
        "g", FixState.PENDING, "waits", ("m",))
    with pytest.raises(ValueError, match=r"unexpected field names: \['colour'\]"):
        status._replace(colour="red")  # type: ignore[call-arg]


def test_text_form() -> None:
    status = FixStatus("f", FixState.PENDING, "waits", waiting_for=("m",))
    assert str(status) == "f=pending (waits)"
    assert str(FixStatus("f", FixState.APPLIED)) == "f=applied"


def test_a_status_survives_pickle_and_copy() -> None:
    status = FixStatus("f", FixState.PENDING, "waits", waiting_for=("m",))
    assert pickle.loads(pickle.dumps(status)) == status
    assert copy.deepcopy(status) == status
