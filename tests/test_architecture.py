"""docs/architecture.md, held to the code: every module listed, and each question's file count
computed by following the code from the question's start to its deciding line.

A question's row names its start and its deciding line (``file.py:Symbol`` in the package) and the
number of the package's files a reader opens on the way. The count here follows the code, not the
page: from the start, every name a reached body uses that resolves to the package (a function or
class of the same module, a name imported from a package module, ``module.attr`` of an imported
package module, ``self.method`` of the class or its package bases, a module-level value) is
reached in turn, up to the deciding symbol, which is reached but not followed further. The files
of everything reached are the files opened. Annotations are not followed (they are never run
here: ``from __future__ import annotations``), nor names looked up by string (``importlib``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "sglang_aiter_plugin"
ARCHITECTURE = (ROOT / "docs" / "architecture.md").read_text()

Symbol = tuple[str, str]
"""(module path relative to the package, e.g. ``fixes/collectives/fix.py``; qualified name in it,
``Class.method``, ``function`` or ``VALUE``; ``""`` for the module itself)."""


@dataclass
class Module:
    """What the follower needs of one module of the package."""

    path: str
    tree: ast.Module
    defs: dict[str, ast.AST] = field(default_factory=dict)  # qualname -> its node
    imports: dict[str, Symbol] = field(default_factory=dict)  # module-level name -> target
    typing: dict[str, Symbol] = field(default_factory=dict)  # imported for annotations only
    bases: dict[str, list[ast.expr]] = field(default_factory=dict)  # class -> its bases


def _module_path(dotted: str) -> str | None:
    """``sglang_aiter_plugin.a.b`` -> ``a/b.py`` or ``a/b/__init__.py`` (``None``: not ours)."""
    if dotted != "sglang_aiter_plugin" and not dotted.startswith("sglang_aiter_plugin."):
        return None
    parts = dotted.split(".")[1:]
    for candidate in (Path(*parts).with_suffix(".py") if parts else None,
                      Path(*parts, "__init__.py")):
        if candidate is not None and (PACKAGE / candidate).is_file():
            return candidate.as_posix()
    return None


def _dotted(path: str) -> str:
    parts = list(Path(path).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["sglang_aiter_plugin", *parts])


def _absolute(module: str, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    base = _dotted(module).split(".")
    if not module.endswith("__init__.py"):
        base.pop()
    base = base[: len(base) - node.level + 1]
    return ".".join([*base, *([node.module] if node.module else [])])


def _import_targets(module: str, node: ast.Import | ast.ImportFrom) -> Iterator[tuple[str, Symbol]]:
    """(local name, package target) for each name ``node`` binds that is the package's."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            path = _module_path(alias.name)
            if path is not None and alias.asname:
                yield alias.asname, (path, "")
        return
    source = _absolute(module, node)
    for alias in node.names:
        local = alias.asname or alias.name
        submodule = _module_path(f"{source}.{alias.name}")
        if submodule is not None:
            yield local, (submodule, "")
        elif (path := _module_path(source)) is not None:
            yield local, (path, alias.name)


class Package:
    """Every module of the package, parsed once."""

    def __init__(self, root: Path = PACKAGE, overrides: dict[str, str] | None = None) -> None:
        self.modules: dict[str, Module] = {}
        for file in sorted(root.rglob("*.py")):
            path = file.relative_to(root).as_posix()
            source = (overrides or {}).get(path, file.read_text())
            self.modules[path] = self._index(path, ast.parse(source))

    @staticmethod
    def _index(path: str, tree: ast.Module) -> Module:
        module = Module(path, tree)
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                module.defs[node.name] = node
            elif isinstance(node, ast.ClassDef):
                module.defs[node.name] = node
                module.bases[node.name] = list(node.bases)
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        module.defs[f"{node.name}.{item.name}"] = item
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name):
                            module.defs[name.id] = node
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                module.imports.update(_import_targets(path, node))
            elif isinstance(node, ast.If):  # ``if TYPE_CHECKING:``: what annotations name
                for inner in ast.walk(node):
                    if isinstance(inner, (ast.Import, ast.ImportFrom)):
                        module.typing.update(_import_targets(path, inner))
        return module

    def resolve(self, target: Symbol) -> Symbol | None:
        """``target`` as defined (a name re-exported by a module resolves to its definition)."""
        seen: set[Symbol] = set()
        while target not in seen:
            seen.add(target)
            path, name = target
            module = self.modules.get(path)
            if module is None:
                return None
            if not name or name in module.defs:
                return target
            head = name.split(".")[0]
            if head in module.imports:
                imported = module.imports[head]
                rest = name[len(head) + 1:]
                target = (imported[0], ".".join(p for p in (imported[1], rest) if p))
                continue
            return None
        return None

    def uses(self, symbol: Symbol) -> set[Symbol]:
        """The package's symbols that ``symbol``'s code names (not its annotations)."""
        path, name = symbol
        module = self.modules[path]
        if not name:  # a module used as such: its module-level names are looked up later
            return set()
        node = module.defs[name]
        cls = name.split(".")[0] if "." in name or isinstance(node, ast.ClassDef) else None
        local: dict[str, Symbol] = dict(module.imports)
        for inner in ast.walk(node):  # imports inside functions
            if isinstance(inner, (ast.Import, ast.ImportFrom)):
                local.update(_import_targets(path, inner))
        found: set[Symbol] = set()
        if isinstance(node, ast.ClassDef):  # a class reached: its methods may all run
            found |= {(path, q) for q in module.defs if q.startswith(f"{name}.")}
        for inner in _code(node):
            if isinstance(inner, ast.Attribute) and isinstance(inner.value, ast.Name):
                base = inner.value.id
                if base == "self" and cls is not None:
                    found |= self._method(path, cls, inner.attr)
                elif base in local and local[base][1] == "":
                    found.add((local[base][0], inner.attr))
                elif base not in local:  # an object: the one class this module names with it
                    found |= self._typed(module, local, inner.attr)
            elif isinstance(inner, ast.Attribute):
                found |= self._typed(module, local, inner.attr)
            if isinstance(inner, ast.Name):
                if inner.id in local:
                    found.add(local[inner.id])
                elif inner.id in module.defs and inner.id != name:
                    found.add((path, inner.id))
        resolved = {self.resolve(s) for s in found}
        return {s for s in resolved if s is not None and s != symbol}

    def _typed(self, module: Module, local: dict[str, Symbol], attr: str) -> set[Symbol]:
        """``obj.attr`` on an object: ``Class.attr`` where exactly one class the module defines
        or imports (for annotations too, as a reader follows them) has it."""
        if attr.startswith("__"):
            return set()
        classes = {(module.path, n) for n, node in module.defs.items()
                   if isinstance(node, ast.ClassDef)}
        classes |= {t for t in (self.resolve(s) for s in (*local.values(),
                                                          *module.typing.values()))
                    if t is not None and self._is_class(t)}
        found = {(p, f"{c}.{attr}") for p, c in classes
                 if f"{c}.{attr}" in self.modules[p].defs}
        return found if len(found) == 1 else set()

    def _is_class(self, symbol: Symbol) -> bool:
        path, name = symbol
        return bool(name) and isinstance(self.modules[path].defs.get(name), ast.ClassDef)

    def _method(self, path: str, cls: str, attr: str) -> set[Symbol]:
        """``self.attr`` inside ``cls``: the method of the class or of its package bases."""
        module = self.modules[path]
        if f"{cls}.{attr}" in module.defs:
            return {(path, f"{cls}.{attr}")}
        found: set[Symbol] = set()
        for base in module.bases.get(cls, []):
            if isinstance(base, ast.Name):
                target = self.resolve((path, base.id)) if base.id in module.defs or \
                    base.id in module.imports else None
                if target is not None and target[1] and "." not in target[1]:
                    found |= self._method(target[0], target[1], attr)
        return found

    def reach(self, start: Symbol, stop: Symbol | None = None) -> set[Symbol]:
        """Every symbol reached from ``start``, not following past ``stop``."""
        reached, queue = {start}, [start]
        while queue:
            symbol = queue.pop()
            if symbol == stop:
                continue
            for used in self.uses(symbol):
                if used not in reached:
                    reached.add(used)
                    queue.append(used)
        return reached

    def follow(self, start: Symbol, decides: Symbol) -> tuple[set[str], bool]:
        """The files a reader opens from ``start`` to ``decides``: those of every symbol on a
        path of uses from one to the other, and of what ``decides`` itself uses (to read the
        deciding line); and whether ``decides`` is reached at all."""
        start, decides = self._defined(start), self._defined(decides)
        reached = self.reach(start, decides)
        if decides not in reached:
            return set(), False
        on_path = {s for s in reached if s == decides or decides in self.reach(s, decides)}
        return {path for path, _ in on_path | self.uses(decides)}, True

    def _defined(self, symbol: Symbol) -> Symbol:
        resolved = self.resolve(symbol)
        assert resolved is not None, f"no {symbol[0]}"
        assert resolved[1] == symbol[1], f"no {symbol[1]} in {symbol[0]}"
        return resolved


def _code(node: ast.AST) -> Iterator[ast.AST]:
    """Every node of ``node`` that runs: annotations left out."""
    stack = [node]
    while stack:
        current = stack.pop()
        yield current
        for name, value in ast.iter_fields(current):
            if name in ("annotation", "returns"):
                continue
            children = value if isinstance(value, list) else [value]
            stack.extend(c for c in children if isinstance(c, ast.AST))


@dataclass(frozen=True)
class Question:
    text: str
    start: Symbol
    decides: Symbol
    stated: int
    files: tuple[str, ...]  # the files the row names, in its last column


def _symbol(cell: str) -> Symbol:
    found = re.fullmatch(r"`([\w/]+\.py):([\w.]+)`", cell)
    assert found is not None, f"not `file.py:Symbol`: {cell}"
    return found.group(1), found.group(2)


def questions(page: str = ARCHITECTURE) -> list[Question]:
    """The questions table: question | start | deciding line | files | which, and why."""
    table = page.split("<!-- questions:start -->")[1].split("<!-- questions:end -->")[0]
    rows = [ln for ln in table.strip().splitlines()[2:] if ln.startswith("|")]
    found = []
    for row in rows:
        text, start, decides, count, which = (c.strip() for c in row.strip().strip("|")
                                              .split(" | "))
        files = tuple(re.findall(r"`([\w/]+\.py)`", which))
        found.append(Question(text, _symbol(start), _symbol(decides), int(count), files))
    return found


PACKAGE_INDEX = Package()
QUESTIONS = questions()


def test_the_page_has_its_questions() -> None:
    assert len(QUESTIONS) >= 8


@pytest.mark.parametrize("question", QUESTIONS, ids=[q.text for q in QUESTIONS])
def test_each_question_takes_no_more_files_than_the_page_says(question: Question) -> None:
    """Counted from the code: a change that makes a reader open one more file to follow a
    question to its deciding line fails here until the page says so (and why)."""
    files, reached = PACKAGE_INDEX.follow(question.start, question.decides)
    assert reached, f"{question.text}: {question.decides} is not reached from {question.start}"
    assert len(files) <= question.stated, (
        f"{question.text}: {len(files)} files from {question.start[0]} to the deciding line, "
        f"the page says {question.stated}: {sorted(files)}")
    assert len(set(question.files)) == question.stated, f"{question.text}: count the files named"
    assert files <= set(question.files), (  # the page names the files the count is made of
        f"{question.text}: the code opens {sorted(files - set(question.files))}, which the page "
        "does not name")


def test_a_questions_count_rises_when_its_deciding_line_needs_one_more_file() -> None:
    """The deliberate change: a question's deciding function is made to call a function of one
    more module (an import and a call, as any change would); the count follows, and the page's
    count no longer holds."""
    question = next(q for q in QUESTIONS if q.decides == ("fixes/__init__.py", "load"))
    before, _ = PACKAGE_INDEX.follow(question.start, question.decides)
    assert len(before) == question.stated
    module, function = next((m, f) for m, f in (("_errors", "shorten"), ("_sglang", "support_of"),
                                                ("_patch", "patched"))
                            if f"{m}.py" not in before)
    path, name = question.decides
    source = (PACKAGE / path).read_text()
    node = next(n for n in ast.parse(source).body
                if isinstance(n, ast.FunctionDef) and n.name == name)
    first = node.body[1] if ast.get_docstring(node) else node.body[0]
    indent = " " * first.col_offset
    lines = source.splitlines()
    lines[first.lineno - 1:first.lineno - 1] = [
        f"{indent}from sglang_aiter_plugin.{module} import {function}", f"{indent}{function}"]
    changed = Package(overrides={path: "\n".join(lines)})
    after, reached = changed.follow(question.start, question.decides)
    assert reached
    assert after == before | {f"{module}.py"}
    assert len(after) > question.stated


def test_the_follower_follows_imports_methods_and_values() -> None:
    files, reached = PACKAGE_INDEX.follow(("_errors.py", "shorten"), ("_errors.py", "shorten"))
    assert (files, reached) == ({"_errors.py"}, True)
    # a method reaches, through self, a base class's method in another module, and a value
    uses = PACKAGE_INDEX.uses(("fixes/collectives/fix.py", "AllReduceFix.counted"))
    assert ("fixes/collectives/probe.py", "Condition") in uses


def test_the_architecture_page_lists_every_module_of_the_package() -> None:
    listing = ARCHITECTURE.split("```")[1]
    for module in sorted(PACKAGE.rglob("*.py")):
        relative = module.relative_to(PACKAGE)
        if relative.name in ("__init__.py", "__main__.py") and relative.parent.name in (
                "", "selftest", "fixes", "plugin"):
            continue  # the package doors: what they hold is said where they are named
        assert relative.name in listing, f"docs/architecture.md does not list {relative}"
