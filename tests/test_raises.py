"""Every exception the package raises is one of its own (each derives from ``AiterExtError`` and
the built-in it stands for): no ``raise <built-in>(...)`` in its source but those named in
:data:`~sglang_aiter_plugin._errors.BUILT_IN_RAISES`, and no ``assert`` used as an error."""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
from pathlib import Path

from sglang_aiter_plugin._errors import BUILT_IN_RAISES, AiterExtError

PACKAGE = Path(__file__).resolve().parents[1] / "sglang_aiter_plugin"

BUILTIN_EXCEPTIONS = frozenset(
    name for name, obj in vars(builtins).items()
    if isinstance(obj, type) and issubclass(obj, BaseException))


def bare_raises(source: str) -> list[tuple[int, str]]:
    """(line, name) of each ``raise`` of a built-in exception (called or not) in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Raise) or node.exc is None:
            continue
        exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        if isinstance(exc, ast.Name) and exc.id in BUILTIN_EXCEPTIONS:
            found.append((node.lineno, exc.id))
    return sorted(found)


def test_the_walk_finds_a_bare_raise() -> None:
    source = "def f(x):\n    if x:\n        raise ValueError('no')\n    raise KeyError\n"
    assert bare_raises(source) == [(3, "ValueError"), (4, "KeyError")]
    assert bare_raises("raise SomethingOfOurs('no')\nraise\n") == []


def test_the_package_raises_no_bare_built_in() -> None:
    walked, found, named = 0, [], set[tuple[str, str]]()
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        walked += 1
        raised = bare_raises(path.read_text())
        named.update((relative, name) for _, name in raised)
        found += [f"{relative}:{line}: raise {name}" for line, name in raised
                  if (relative, name) not in BUILT_IN_RAISES]
    assert walked > 30  # the walk saw the package
    assert found == [], "raise one of the plugin's exceptions (sglang_aiter_plugin._errors)"
    assert set(BUILT_IN_RAISES) <= named, "BUILT_IN_RAISES names a raise that is gone"


def asserts(source: str) -> list[int]:
    """The line of each ``assert`` in ``source`` (removed under ``python -O``: never an error)."""
    return sorted(node.lineno for node in ast.walk(ast.parse(source))
                  if isinstance(node, ast.Assert))


def test_the_walk_finds_an_assert() -> None:
    assert asserts("def f(x):\n    assert x is not None\n    return x\n") == [2]


def test_the_package_uses_no_assert_as_an_error() -> None:
    found = [f"{path.relative_to(PACKAGE).as_posix()}:{line}"
             for path in sorted(PACKAGE.rglob("*.py")) for line in asserts(path.read_text())]
    assert found == [], "raise one of the plugin's exceptions instead"


def test_each_of_the_packages_exceptions_also_derives_from_its_built_in() -> None:
    """``except ValueError`` (or whichever built-in it stands for) keeps catching it."""
    own: list[type] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        tree = ast.parse(path.read_text())
        if not any(isinstance(n, ast.ClassDef) for n in tree.body):
            continue
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        if name.endswith("__main__"):
            continue
        try:
            module = importlib.import_module(name)
        except ImportError:  # a module needing what is not here (torch's GPU parts)
            continue
        own += [cls for _, cls in inspect.getmembers(module, inspect.isclass)
                if issubclass(cls, AiterExtError) and cls.__module__ == name]
    assert len(own) > 15  # the walk saw the package's exceptions
    bare = [cls.__qualname__ for cls in own if cls is not AiterExtError
            and not any(base not in (Exception, BaseException) and base.__module__ == "builtins"
                        for base in cls.__mro__[1:] if issubclass(base, BaseException))]
    assert bare == [], "derive from AiterExtError and the built-in the error stands for"
