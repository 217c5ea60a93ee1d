"""wrap_once: every patch of the plugin wraps once, and is found below other layers."""

from __future__ import annotations

import functools
from typing import Any

from sglang_aiter_plugin._patch import MARK, patched, wrap_once


def _plus_one(fn: Any) -> Any:
    def wrapper(*args: Any) -> Any:
        return fn(*args) + 1

    return wrapper


def _original(x: int) -> int:
    return x


def test_an_attribute_and_a_mapping_item_are_wrapped_once_each() -> None:
    holder = type("Holder", (), {})()
    holder.fn = _original
    table = {"fn": _original}
    assert wrap_once(holder, "fn", "a", _plus_one) is True
    assert wrap_once(holder, "fn", "a", _plus_one) is False
    assert wrap_once(table, "fn", "a", _plus_one, item=True) is True
    assert wrap_once(table, "fn", "a", _plus_one, item=True) is False
    assert holder.fn(1) == table["fn"](1) == 2
    assert holder.fn.__wrapped__ is _original
    assert getattr(holder.fn, MARK) == "a"


def test_two_patches_stack_and_each_is_found_below_an_unmarked_layer() -> None:
    holder = type("Holder", (), {})()
    holder.fn = _original
    wrap_once(holder, "fn", "a", _plus_one)
    wrap_once(holder, "fn", "b", _plus_one)
    outer = functools.wraps(holder.fn)(lambda x: holder.fn.__wrapped__(x))  # another layer
    holder.fn = outer
    assert patched(holder.fn, "a")
    assert patched(holder.fn, "b")
    assert patched(holder.fn)
    assert not patched(holder.fn, "c")
    assert wrap_once(holder, "fn", "a", _plus_one) is False
    assert not patched(_original)
