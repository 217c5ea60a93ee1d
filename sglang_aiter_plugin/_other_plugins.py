"""Other sglang plugins on the symbols this plugin wraps: who wraps what, in which order, and
what that leaves of the plugin's capture conditions.

``doctor``'s fresh interpreter (its discovery probe) runs sglang's own ``load_plugins()`` through
:func:`observe`: sglang's loop calls every plugin's ``register()`` in its order (entry-point
discovery order; ``SGLANG_PLUGINS`` only filters), then applies its ``HookRegistry``; after each
step the symbols of :func:`watched` are read, and finally their modules are imported as a launch
imports them. Each wrapper layer (found through ``__wrapped__`` down to sglang's own function) is
attributed to: this plugin where its code is the plugin's; the plugin whose hook sglang's
``HookRegistry`` applied; else the plugin after whose ``register()`` it first appeared; else
(installed later, when sglang imported the module) the distribution whose file defines it.
:func:`summaries` turns that into ``doctor``'s ``other plugins`` rows.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.metadata
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple

__all__ = ["ENTRY_POINT_NAME", "Symbol", "observe", "summaries", "watched"]

ENTRY_POINT_NAME = "aiter_ext"
GROUP = "sglang.srt.plugins"
BEFORE = "before sglang's loader ran"  # the stages a layer may first appear in
REGISTRY = "sglang's HookRegistry"
IMPORT = "when sglang imported its module"
_PACKAGE_DIR = Path(__file__).resolve().parent
LATER = ("A wrapper a plugin installs later, when it loads a model (as ROCm/ATOM wraps "
         "graph_capture for its models), is not seen here; on graph_capture it would end up "
         "outermost")


class Symbol(NamedTuple):
    """A symbol of sglang's: ``module``'s ``holder`` (a class, or a dict with ``item``), the first
    of ``names`` it has (a release's variant). ``inside``: the plugin does not wrap it, but sglang
    calls it within that ``GroupCoordinator`` method, which the plugin may wrap."""

    module: str
    holder: str
    names: tuple[str, ...]
    item: bool = False
    inside: str | None = None

    def resolve(self) -> tuple[str, Any] | None:
        """``(label, current object)``, or ``None`` where the module is not imported or the
        holder has none of :attr:`names`."""
        holder = getattr(sys.modules.get(self.module), self.holder, None)
        for name in self.names:
            if self.item and isinstance(holder, Mapping) and name in holder:
                return f"{self.holder}[{name!r}]", holder[name]
            if not self.item and holder is not None and hasattr(holder, name):
                return f"{self.holder}.{name}", getattr(holder, name)
        return None


def watched() -> tuple[Symbol, ...]:
    """What the plugin wraps (read from the fixes), and the decode graph runner's per-shape
    capture, which sglang runs inside ``GroupCoordinator.graph_capture``."""
    from sglang_aiter_plugin.fixes.attention_backend.choice import STOCK_NAME
    from sglang_aiter_plugin.fixes.attention_backend.fix import REGISTRY_MODULE, SERVER_ARGS_MODULE
    from sglang_aiter_plugin.fixes.attention_backend.sites import (
        DRAFT_FACTORY_SITES,
        DRAFT_UTILS_MODULE,
    )
    from sglang_aiter_plugin.fixes.collectives import registered
    from sglang_aiter_plugin.fixes.collectives.fix import PARALLEL_STATE, WHOLE_CAPTURE

    methods = dict.fromkeys([WHOLE_CAPTURE, *(m.name for fix in registered()
                                              for m in fix.methods)])
    return (
        *(Symbol(PARALLEL_STATE, "GroupCoordinator", (name,)) for name in methods),
        Symbol("sglang.srt.model_executor.runner.decode_cuda_graph_runner",
               "DecodeCudaGraphRunner", ("capture_one_shape",), inside=WHOLE_CAPTURE),  # 0.5.15+
        Symbol("sglang.srt.model_executor.cuda_graph_runner", "CudaGraphRunner",
               ("capture_one_batch_size",), inside=WHOLE_CAPTURE),
        Symbol(REGISTRY_MODULE, "ATTENTION_BACKENDS", (STOCK_NAME,), item=True),
        *(Symbol(DRAFT_UTILS_MODULE, "DraftBackendFactory", (name,))
          for name in DRAFT_FACTORY_SITES),
        Symbol(SERVER_ARGS_MODULE, "ServerArgs", ("resolve_once", "__post_init__")),  # fold point
    )


def _function_of(fn: Any) -> Any:
    """The function whose code ``fn`` runs: through bound methods and partials, and from
    ``contextlib.contextmanager``'s helper to the generator function it closes over."""
    fn = getattr(fn, "__func__", fn)
    if isinstance(fn, functools.partial):
        fn = fn.func
    code = getattr(fn, "__code__", None)
    if code is not None and code.co_filename == contextlib.__file__:
        for cell in getattr(fn, "__closure__", None) or ():
            with contextlib.suppress(ValueError):  # an empty cell
                if getattr(cell.cell_contents, "__code__", None) is not None:
                    return _function_of(cell.cell_contents)
    return fn


def _file_of(fn: Any) -> Path | None:
    code = getattr(_function_of(fn), "__code__", None)
    return Path(code.co_filename).resolve() if code is not None else None


def _sglang_dir() -> Path | None:
    module = sys.modules.get("sglang")
    where = next(iter(getattr(module, "__path__", None) or []), None)
    return Path(where).resolve() if where else None


def _is_registry_layer(fn: Any) -> bool:
    file = _file_of(fn)
    return file is not None and file.name == "hook_registry.py" and file.parent.name == "plugins"


def _is_sglangs(fn: Any, sglang: Path | None) -> bool:
    """Whether ``fn`` is sglang's own function (its code lies in sglang's package, outside its
    hook registry's wrappers)."""
    file = _file_of(fn)
    return (sglang is not None and file is not None and file.is_relative_to(sglang)
            and not _is_registry_layer(fn))


def layers(fn: Any) -> tuple[list[Any], bool]:
    """The wrappers above sglang's own function, outermost first, and whether the chain of
    ``__wrapped__`` reaches sglang's function (``False``: a layer keeps no ``__wrapped__``)."""
    sglang = _sglang_dir()
    found: list[Any] = []
    seen: set[int] = set()
    while fn is not None and id(fn) not in seen:
        if _is_sglangs(fn, sglang):
            return found, True
        seen.add(id(fn))
        found.append(fn)
        fn = getattr(fn, "__wrapped__", None)
    return found, False


def _registry_hook(layer: Any, plugins: ModuleType) -> tuple[str, str] | None:
    """``(plugin, hook type)`` of a wrapper sglang's ``HookRegistry`` built, from its records."""
    registry = getattr(getattr(plugins, "HookRegistry", None), "_hooks", {})
    cells = []
    for cell in getattr(layer, "__closure__", None) or ():
        with contextlib.suppress(ValueError):
            cells.append(cell.cell_contents)
    for records in registry.values():
        for hook_type, hook, source in records:
            if any(hook is c for c in cells):
                return (getattr(source, "plugin_name", None) or "an unnamed source",
                        getattr(hook_type, "value", str(hook_type)))
    return None


def _entry_point_of(file: Path | None) -> str | None:
    """The entry point of :data:`GROUP` whose distribution holds ``file``."""
    if file is None:
        return None
    for dist in importlib.metadata.distributions():
        names = [ep.name for ep in dist.entry_points if ep.group == GROUP]
        if not names:
            continue
        for entry in dist.files or ():
            with contextlib.suppress(OSError, ValueError):
                if Path(str(dist.locate_file(entry))).resolve() == file:
                    return names[0]
    return None


def observe(plugins: ModuleType) -> dict[str, Any]:
    """Run sglang's ``plugins.load_plugins()`` (in a fresh interpreter: it runs once per process),
    reading :func:`watched` after each step; return what :func:`summaries` reads: the loader's
    order, each symbol's wrapper layers (outermost first) and the modules that did not import."""
    symbols = watched()
    first: dict[int, str] = {}
    kept: list[Any] = []  # every layer seen stays alive, so that no id is reused

    def snapshot(stage: str) -> None:
        for symbol in symbols:
            current = symbol.resolve()
            for layer in layers(current[1])[0] if current else ():
                if id(layer) not in first:
                    first[id(layer)] = stage
                    kept.append(layer)

    order: list[str] = []
    real = plugins.load_plugins_by_group

    def by_group(group: str, excluded_dists: set[str] | None = None) -> dict[str, Any]:
        found: dict[str, Any] = real(group, excluded_dists=excluded_dists)
        if group != GROUP:
            return found
        order[:] = list(found)

        def watching(name: str, func: Callable[[], Any]) -> Callable[[], Any]:
            def register() -> Any:
                try:
                    return func()
                finally:
                    snapshot(name)
            return register

        return {name: (watching(name, func), dist) for name, (func, dist) in found.items()}

    snapshot(BEFORE)
    setattr(plugins, "load_plugins_by_group", by_group)  # noqa: B010  (what load_plugins calls)
    try:
        plugins.load_plugins()
    finally:
        setattr(plugins, "load_plugins_by_group", real)  # noqa: B010
    snapshot(REGISTRY)
    failed = {}
    for module in dict.fromkeys(s.module for s in symbols):
        try:
            importlib.import_module(module)
        except Exception as exc:
            failed[module] = f"{type(exc).__name__}: {exc}"
    snapshot(IMPORT)
    found_symbols = []
    for symbol in symbols:
        current = symbol.resolve()
        if current is None:
            continue
        chain, reaches = layers(current[1])
        found_symbols.append({"symbol": current[0], "inside": symbol.inside,
                              "reaches_sglang": reaches,
                              "layers": [_describe(layer, first.get(id(layer), IMPORT), plugins)
                                         for layer in chain]})
    return {"order": order, "symbols": found_symbols, "not_imported": failed}


def _describe(layer: Any, stage: str, plugins: ModuleType) -> dict[str, Any]:
    """Who installed one wrapper layer, how, and whether it calls what lies below it."""
    from sglang_aiter_plugin._patch import MARK

    file = _file_of(layer)
    if file is not None and file.is_relative_to(_PACKAGE_DIR):
        return {"by": ENTRY_POINT_NAME, "how": getattr(layer, MARK, "the plugin's wrapper"),
                "calls_inside": True}
    hook = _registry_hook(layer, plugins) if _is_registry_layer(layer) else None
    if hook is not None:
        return {"by": hook[0], "how": f"a {hook[1]} hook of {REGISTRY}",
                "calls_inside": hook[1] != "replace"}
    if stage not in (BEFORE, REGISTRY, IMPORT):
        return {"by": stage, "how": "its register()", "calls_inside": True}
    return {"by": _entry_point_of(file), "how": f"{stage} ({file})", "calls_inside": True}


def _order_text(order: list[str], allow_list: str | None) -> str:
    how = (f"SGLANG_PLUGINS={allow_list} only filters, it does not order" if allow_list
           else "SGLANG_PLUGINS is unset, so every plugin of the group loads")
    return (f"sglang's loader calls register() in this order: {', '.join(order)} (the entry "
            f"points' discovery order: sys.path, then each folder's listing; {how})")


def _consequence(symbol: dict[str, Any], other: str, outermost: str) -> str:
    """What the two wrappers' nesting means for the plugin's capture conditions on one symbol."""
    name = symbol["symbol"]
    if name.endswith(".graph_capture"):
        return ("the plugin's capture conditions still apply to everything run in the "
                "capture's body (under a condition the group's communicator's registration flag "
                f"reads off there), though not to what {other}'s wrapper runs itself on "
                "entering or leaving the scope, before the plugin's view opens and after it "
                "closes")
    if name.startswith("GroupCoordinator."):
        if outermost == ENTRY_POINT_NAME:
            return ("every call reaches the plugin's wrapper first, so its capture conditions "
                    "apply to the calls it passes on")
        return (f"the plugin's capture conditions apply to the calls {other}'s wrapper passes "
                f"on, not to what {other}'s wrapper runs on aiter's communicator itself")
    return "no capture condition depends on it; both wrappers run"


def _symbol_text(symbol: dict[str, Any], other: str, scope_wrapped: bool) -> str:
    """One symbol that ``other`` wraps: the nesting, and what it leaves of the conditions."""
    name, chain = symbol["symbol"], symbol["layers"]
    bys = [layer["by"] for layer in chain]
    mine = [i for i, by in enumerate(bys) if by == ENTRY_POINT_NAME]
    theirs = [i for i, by in enumerate(bys) if by == other]
    if symbol["inside"] is not None:
        where = (f"the plugin wraps {symbol['inside']} here, so under a capture condition "
                 f"{other}'s wrapper sees aiter's registration flag off" if scope_wrapped else
                 f"the plugin does not wrap {symbol['inside']} here (no capture condition "
                 "applies)")
        return (f"{name}: sglang calls it inside GroupCoordinator.{symbol['inside']}, so "
                f"{other}'s wrapper runs within the plugin's whole-capture scope; {where}")
    if not mine:
        unseen = "" if symbol["reaches_sglang"] else (
            "; a wrapper keeps no __wrapped__, so doctor cannot see whether the plugin's "
            "wrapper lies below it")
        return f"{name}: the plugin does not wrap it in this environment{unseen}"
    outer = chain[0]["by"] or "an unattributed wrapper"
    blocked = [chain[i]["by"] or "an unattributed wrapper" for i in range(mine[0])
               if not chain[i]["calls_inside"]]
    if blocked:
        return (f"{name}: {blocked[0]}'s hook replaces the function without calling what lies "
                "below, so the plugin's wrapper is never reached: its capture conditions do not "
                "apply there")
    nesting = (f"{other}'s wrapper is outermost, the plugin's ({chain[mine[0]]['how']}) inside "
               "it, reached where it calls through" if theirs[0] < mine[0] else
               f"the plugin's wrapper ({chain[mine[0]]['how']}) is outermost, {other}'s inside "
               "it")
    if outer not in (other, ENTRY_POINT_NAME):
        nesting += f" ({outer}'s wrapper is outermost of all)"
    return f"{name}: {nesting}; {_consequence(symbol, other, bys[0])}"


def summaries(result: Mapping[str, Any], allow_list: str | None) -> tuple[list[str], str]:
    """``doctor``'s rows from :func:`observe`'s ``result``: one warning per other plugin that
    wraps a watched symbol, and the text of the ``ok`` row for none (``allow_list``: the value
    of ``SGLANG_PLUGINS``)."""
    symbols = result["symbols"]
    order: list[str] = result["order"]
    scope_wrapped = any(s["symbol"].endswith(".graph_capture") and
                        any(layer["by"] == ENTRY_POINT_NAME for layer in s["layers"])
                        for s in symbols)
    others = dict.fromkeys(layer["by"] or "an unattributed wrapper" for s in symbols
                           for layer in s["layers"] if layer["by"] != ENTRY_POINT_NAME)
    warnings = []
    for other in others:
        wrapped = [s for s in symbols
                   if any((layer["by"] or "an unattributed wrapper") == other
                          for layer in s["layers"])]
        how = "; ".join(dict.fromkeys(layer["how"] for s in wrapped for layer in s["layers"]
                                      if (layer["by"] or "an unattributed wrapper") == other))
        loads = (f"{_order_text(order, allow_list)}, so it loads both" if other in order
                 and ENTRY_POINT_NAME in order else _order_text(order, allow_list) + (
                     f"; '{ENTRY_POINT_NAME}' is not among them" if ENTRY_POINT_NAME not in order
                     else ""))
        per_symbol = "; ".join(_symbol_text(s, other, scope_wrapped) for s in wrapped)
        warnings.append(f"{other} also wraps {', '.join(s['symbol'] for s in wrapped)} (through "
                        f"{how}). {loads}. {per_symbol}. {LATER}")
    names = ", ".join(s["symbol"] for s in symbols if s["inside"] is None)
    ok = (f"no other plugin of {GROUP} wraps what the plugin wraps ({names}) or the decode graph "
          f"runner's capture, after sglang's loader ran every plugin's register() in a fresh "
          f"process ({', '.join(order) or 'none loaded'}) and the modules were imported; "
          f"{LATER[0].lower()}{LATER[1:]}")
    return warnings, ok
