"""``rebound``: sglang's own function, run with some names resolved to other objects."""

from __future__ import annotations

import sys
import threading
from typing import Any

import pytest

from sglang_aiter_plugin._rebind import RebindError, rebound


class Stock:
    pass


class Ours(Stock):
    pass


def builds_through_a_global() -> Any:
    return Stock()


def builds_through_an_import() -> Any:
    from tests.test_rebind import Stock  # the shape of sglang's factories

    return Stock()


def test_a_global_name_resolves_to_the_given_object_in_the_copy_only() -> None:
    copy = rebound(builds_through_a_global, {"Stock": Ours})
    assert type(copy()) is Ours
    assert type(builds_through_a_global()) is Stock  # the original is untouched
    assert globals()["Stock"] is Stock


def test_an_import_inside_the_function_resolves_to_the_given_object() -> None:
    copy = rebound(builds_through_an_import, {"Stock": Ours}, module="tests.test_rebind")
    assert type(copy()) is Ours
    assert type(builds_through_an_import()) is Stock


def test_a_name_the_function_no_longer_uses_is_an_error_naming_it() -> None:
    with pytest.raises(RebindError, match=r"no longer looks up \['Missing'\]"):
        rebound(builds_through_a_global, {"Missing": Ours})
    assert rebound(builds_through_a_global, {"Missing": Ours}, strict=False)() is not None


def test_other_threads_never_see_the_rebinding() -> None:
    seen: list[type] = []
    start, done = threading.Event(), threading.Event()

    def other() -> None:
        start.wait()
        seen.append(type(builds_through_a_global()))
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    copy = rebound(builds_through_a_global, {"Stock": Ours})
    start.set()
    done.wait(5)
    assert type(copy()) is Ours
    thread.join()
    assert seen == [Stock]


def _imports_a_module_that_is_not_here() -> Any:
    from not_installed_anywhere.sub import Thing

    return Thing


def _imports_json_names() -> Any:
    from json import dumps, loads

    return dumps, loads


def test_a_module_whose_requested_names_are_all_given_is_never_imported() -> None:
    thing = object()
    copy = rebound(_imports_a_module_that_is_not_here, {"Thing": thing},
                   module="not_installed_anywhere.sub", strict=False)
    assert copy() is thing
    assert "not_installed_anywhere" not in sys.modules


def test_names_not_given_still_come_from_the_real_module() -> None:
    import json

    given = object()
    copy = rebound(_imports_json_names, {"dumps": given}, module="json", strict=False)
    assert copy() == (given, json.loads)
