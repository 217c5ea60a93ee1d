"""The registry: every fix of the plugin is one entry of :data:`BUILTIN_FIXES` plus its module;
everything else that names a fix (the switches, the plugin manager, ``doctor``, the ledger page,
the tests) reads it from here.

Each entry's plugin is a pluggy plugin (a module, or an object such as the collective fixes)
implementing :func:`~sglang_aiter_plugin.plugin.spec.aiter_ext_apply_fix`, with its entry in the
plugin's ledger as its ``ledger``. Importing this module imports nothing of the fixes, so their
names can be read without pluggy or sglang; :func:`load` imports one.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sglang_aiter_plugin._ledger import Defect

__all__ = ["BUILTIN_FIXES", "RETIRED_FIXES", "ledger_sections", "load", "name_of",
           "retired_reasons"]

#: (fix name, the plugin: ``module`` or ``module:object``), in the order the fixes are applied
#: and reported; the plugin manager imports each one it does not block.
BUILTIN_FIXES: tuple[tuple[str, str], ...] = (
    ("attention-backend", "sglang_aiter_plugin.fixes.attention_backend.fix"),
    ("capture-all-reduce", "sglang_aiter_plugin.fixes.collectives:ALL_REDUCE"),
    ("capture-all-gather", "sglang_aiter_plugin.fixes.collectives:ALL_GATHER"),
    ("capture-reduce-scatter", "sglang_aiter_plugin.fixes.collectives:REDUCE_SCATTER"),
    ("capture-fused-ar-rmsnorm", "sglang_aiter_plugin.fixes.collectives:FUSED_AR_RMSNORM"),
)

RETIRED_FIXES: tuple[Defect, ...] = ()
"""Fixes that were once in :data:`BUILTIN_FIXES`, kept as ledger entries (with ``fixed_in``):
listed in ``SGLANG_AITER_EXT_DISABLE`` their names are accepted and noted, never unknown."""


def load(value: str) -> object:
    """The plugin a ``module[:object]`` value of :data:`BUILTIN_FIXES` names."""
    module, _, name = value.partition(":")
    loaded = importlib.import_module(module)
    return getattr(loaded, name) if name else loaded


def name_of(plugin: str) -> str:
    """The name of the fix whose plugin is ``plugin`` (a ``module[:object]`` value of
    :data:`BUILTIN_FIXES`), read without importing it."""
    return next(name for name, value in BUILTIN_FIXES if value == plugin)


def retired_reasons() -> dict[str, str]:
    """Each retired fix's name -> why nothing replaces it, from its ledger entry."""
    return {d.name: f"sglang {d.fixed_in} fixed it upstream ({d.upstream})"
            for d in RETIRED_FIXES}


def ledger_sections() -> list[tuple[str, tuple[Defect, ...]]]:
    """The whole ledger, as the docs page and ``sglang-aiter-plugin ledger`` show it: the fixes
    (each plugin's ``ledger``), the backend's defects, and the retired fixes."""
    from sglang_aiter_plugin.backend.defects import DEFECTS

    fixes = tuple(load(value).ledger for _, value in BUILTIN_FIXES)  # type: ignore[attr-defined]
    sections = [("Fixes applied at plugin load", fixes),
                ("Defects of upstream's AITER backend that aiter-ext's graph set-up rights",
                 DEFECTS)]
    return sections + ([("Retired fixes", RETIRED_FIXES)] if RETIRED_FIXES else [])
