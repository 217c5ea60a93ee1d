"""Every exception the plugin defines derives from its one base, ``AiterExtError``."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import sglang_aiter_plugin
from sglang_aiter_plugin import AiterExtError
from sglang_aiter_plugin._errors import shorten


def _plugin_exceptions() -> list[type[BaseException]]:
    found = []
    for info in pkgutil.walk_packages(sglang_aiter_plugin.__path__, "sglang_aiter_plugin."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if (issubclass(obj, BaseException) and obj.__module__ == module.__name__
                    and not obj.__name__.startswith("_")):
                found.append(obj)
    return found


def test_every_plugin_exception_derives_from_the_one_base() -> None:
    exceptions = _plugin_exceptions()
    assert len(exceptions) > 5  # the walk found the package's exceptions at all
    outside = [f"{e.__module__}.{e.__qualname__}" for e in exceptions
               if e is not AiterExtError and not issubclass(e, AiterExtError)]
    assert outside == []


def test_the_base_is_exported_at_the_top() -> None:
    assert "AiterExtError" in sglang_aiter_plugin.__all__
    assert sglang_aiter_plugin.AiterExtError is AiterExtError


def test_a_long_value_is_cut_with_its_length_quoted_or_not() -> None:
    long = "x" * 400
    assert shorten("short") == "'short'"
    assert shorten("short", quoted=False) == "short"
    assert shorten(long, 300) == f"'{'x' * 300}'... (400 characters in all)"
    assert shorten(long, 300, quoted=False) == f"{'x' * 300}... (400 characters in all)"
