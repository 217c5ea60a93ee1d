"""Each built-in fix carries a ledger: what it patches, why, how, upstream, when to remove it."""

from __future__ import annotations

import importlib
import re
from importlib.metadata import EntryPoint

import pytest

from sglang_aiter_plugin.fixes import BUILTIN_FIXES

SECTIONS = ("Patches", "Why:", "How:", "Upstream PR:", "Remove when:")
SYMBOL = re.compile(r"``(sglang\.[\w.]+):([\w.\[\]'\-]+)``")


@pytest.mark.parametrize(("name", "module"), BUILTIN_FIXES)
def test_every_builtin_fix_has_a_complete_ledger(name: str, module: str) -> None:
    """The ledger is the docstring of what the entry point loads (a module or a fix object)."""
    doc = EntryPoint(name, module, "test").load().__doc__ or ""
    assert doc.startswith(f"Fix ``{name}``"), f"{module}: the ledger does not name its fix"
    positions = [doc.find(section) for section in SECTIONS]
    assert -1 not in positions, f"{module}: missing {[s for s in SECTIONS if s not in doc]}"
    assert positions == sorted(positions), f"{module}: sections out of order"
    patches = doc[positions[0]:positions[1]]
    assert SYMBOL.findall(patches), f"{module}: the ledger names no sglang symbol"


def test_the_attention_backend_ledger_lists_exactly_its_target_table() -> None:
    from sglang_aiter_plugin.selection import fix
    from sglang_aiter_plugin.selection.sites import TARGETS

    doc = fix.__doc__ or ""
    patches = doc[doc.index("Patches"):doc.index("Why:")]
    named = {f"{m}:{q}" for m, q in SYMBOL.findall(patches)}
    assert named == {str(t) for t in TARGETS}


@pytest.mark.usefixtures("plugins_loaded")
def test_every_target_exists_in_the_installed_release() -> None:
    """The table names real symbols: a rename in sglang turns this red before users see it."""
    from sglang_aiter_plugin.selection.sites import TARGETS

    missing = []
    for target in TARGETS:
        module = importlib.import_module(target.module)
        head, _, key = target.qualname.partition("[")
        obj: object = module
        for part in head.split("."):
            obj = getattr(obj, part, None)
        if key:
            obj = obj.get(key.rstrip("]").strip("'")) if isinstance(obj, dict) else None
        release_specific = re.search(r"\(0\.5\.\d+", target.change) is not None
        if obj is None and not release_specific:
            missing.append(str(target))
    assert missing == []


@pytest.mark.usefixtures("plugins_loaded")
def test_the_release_specific_fold_point_exists_and_is_in_the_table() -> None:
    from sglang.srt.server_args import ServerArgs

    from sglang_aiter_plugin.selection.choice import fold_point
    from sglang_aiter_plugin.selection.sites import TARGETS

    point = fold_point(ServerArgs)
    assert callable(getattr(ServerArgs, point))
    assert f"ServerArgs.{point}" in {t.qualname for t in TARGETS}
