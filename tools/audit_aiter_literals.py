#!/usr/bin/env python3
"""Audit where an sglang release treats the name ``"aiter"`` specially and builds aiter backends.

    python tools/audit_aiter_literals.py SGLANG_PACKAGE_DIR            # print the audit
    python tools/audit_aiter_literals.py SGLANG_PACKAGE_DIR --write    # writes it into
        tests/fixes/attention_backend/audit/<ver>.txt

SGLANG_PACKAGE_DIR is the ``sglang`` package directory of an installed or unzipped release.
One line per finding, sorted, under ``srt/``:

* ``literal PATH:LINE QUALNAME ROLE`` -- every AST string constant ``"aiter"``; ROLE is the
  syntax around it (``compare``, ``dict-key``, ``in-list``, ``call-arg:NAME``, ``return``, ...).
* ``construct PATH:LINE QUALNAME CLASS BINDING`` -- every call of ``AiterAttnBackend(...)`` or
  ``AiterMultiStepDraftBackend(...)``; BINDING says where the name comes from at call time
  (``local-import`` from aiter_backend inside the function, or ``module-global``).
* ``reference PATH:LINE QUALNAME CLASS`` -- every other use of those two names (annotations,
  ``isinstance``); a new ``super(AiterAttnBackend, ...)`` or ``type(x) is ...`` shows up here.
* ``pipeline-first-step NAME`` -- the first step ``run_resolution_pipeline`` calls (0.5.19+).

The CPU tests compare the installed release with its pinned file, so a release that adds,
moves or drops one of these fails loudly instead of silently diverging.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

__all__ = ["audit", "release_of"]

CLASSES = ("AiterAttnBackend", "AiterMultiStepDraftBackend")
PIPELINE = "srt/arg_groups/pipeline.py"
AUDIT_DIR = (Path(__file__).resolve().parent.parent / "tests" / "fixes" / "attention_backend"
             / "audit")


class _Visitor(ast.NodeVisitor):
    def __init__(self, path: str) -> None:
        self.path = path
        self.stack: list[str] = []
        self.local_imports: list[set[str]] = [set()]
        self.lines: list[str] = []
        self.calls: set[int] = set()

    def _scoped(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> None:
        self.stack.append(node.name)
        is_function = not isinstance(node, ast.ClassDef)
        if is_function:
            names = {
                alias.asname or alias.name
                for sub in ast.walk(node)
                if isinstance(sub, ast.ImportFrom) and (sub.module or "").endswith("aiter_backend")
                for alias in sub.names
            }
            self.local_imports.append(names)
        self.generic_visit(node)
        if is_function:
            self.local_imports.pop()
        self.stack.pop()

    visit_FunctionDef = _scoped
    visit_AsyncFunctionDef = _scoped
    visit_ClassDef = _scoped

    @property
    def qualname(self) -> str:
        return ".".join(self.stack) or "<module>"

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id in CLASSES:
            local = any(node.func.id in names for names in self.local_imports[1:])
            binding = "local-import" if local else "module-global"
            self.calls.add(id(node.func))
            self.lines.append(
                f"construct {self.path}:{node.lineno} {self.qualname} {node.func.id} {binding}"
            )
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in CLASSES and isinstance(node.ctx, ast.Load) and id(node) not in self.calls:
            self.lines.append(f"reference {self.path}:{node.lineno} {self.qualname} {node.id}")
        self.generic_visit(node)

    def generic_visit(self, node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Constant) and child.value == "aiter":
                self.lines.append(
                    f"literal {self.path}:{child.lineno} {self.qualname} {_role(node, child)}"
                )
        super().generic_visit(node)


def _role(parent: ast.AST, node: ast.AST) -> str:
    if isinstance(parent, ast.Compare):
        return "compare"
    if isinstance(parent, ast.Dict):
        return "dict-key" if node in parent.keys else "dict-value"
    if isinstance(parent, (ast.List, ast.Tuple, ast.Set)):
        return "in-" + type(parent).__name__.lower()
    if isinstance(parent, ast.Call):
        func = parent.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "?")
        return f"call-arg:{name}"
    if isinstance(parent, ast.keyword):
        return f"keyword:{parent.arg}"
    if isinstance(parent, (ast.Assign, ast.AnnAssign)):
        return "assign"
    if isinstance(parent, ast.Return):
        return "return"
    return type(parent).__name__.lower()


def _first_pipeline_step(tree: ast.Module) -> str | None:
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and fn.name == "run_resolution_pipeline":
            calls = sorted(
                (c for c in ast.walk(fn) if isinstance(c, ast.Call)),
                key=lambda c: (c.lineno, c.col_offset),
            )
            for call in calls:
                func = call.func
                if isinstance(func, ast.Name) and func.id == "run_hook" and call.args:
                    arg = call.args[0]
                    return arg.id if isinstance(arg, ast.Name) else ast.unparse(arg)
                if isinstance(func, ast.Name) and func.id.startswith(("handle_", "validate_")):
                    return func.id
    return None


def audit(package_dir: Path) -> list[str]:
    """The sorted audit lines of the sglang package at ``package_dir``."""
    srt = package_dir / "srt"
    lines: list[str] = []
    for file in sorted(srt.rglob("*.py")):
        rel = file.relative_to(package_dir).as_posix()
        source = file.read_text(encoding="utf-8-sig")
        if rel != PIPELINE and "aiter" not in source.lower():
            continue  # no finding in it (a literal written "ai" "ter" or "\x61iter" is missed)
        tree = ast.parse(source, filename=rel)
        visitor = _Visitor(rel)
        visitor.visit(tree)
        lines += visitor.lines
        if rel == PIPELINE:
            lines.append(f"pipeline-first-step {_first_pipeline_step(tree)}")
    return sorted(lines, key=_sort_key)


def _sort_key(line: str) -> tuple[str, str, int]:
    kind, _, rest = line.partition(" ")
    match = re.match(r"([^:]+):(\d+)", rest)
    return (kind, match.group(1), int(match.group(2))) if match else (kind, rest, 0)


def release_of(package_dir: Path) -> str:
    """The release number written in ``sglang/_version.py``."""
    text = (package_dir / "_version.py").read_text(encoding="utf-8")
    match = re.search(r"__version__\s*=\s*(?:version\s*=\s*)?[\"']([^\"']+)", text)
    if match is None:
        raise SystemExit(f"no __version__ in {package_dir / '_version.py'}")
    return match.group(1)


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    package_dir = Path(argv[0])
    if not (package_dir / "srt").is_dir():
        print(f"{package_dir} is not an sglang package directory (no srt/)", file=sys.stderr)
        return 2
    lines = audit(package_dir)
    text = "".join(line + "\n" for line in lines)
    if "--write" in argv[1:]:
        target = AUDIT_DIR / f"{release_of(package_dir)}.txt"
        target.write_text(text, encoding="utf-8")
        print(f"wrote {target} ({len(lines)} lines)")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
