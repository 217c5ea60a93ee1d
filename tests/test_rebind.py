"""``rebound``: names inside an sglang function resolved to other objects, nothing patched."""

from __future__ import annotations

import sys
from typing import Any

from sglang_aiter_plugin._rebind import rebound


def _imports_a_module_that_is_not_here() -> Any:
    from not_installed_anywhere.sub import Thing  # type: ignore[import-not-found]

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
