"""``sglang-aiter-plugin doctor``: what this machine, this sglang and this plugin will do.

Each check imports what it needs itself: one that cannot (a broken install) becomes a ``FAIL``
row naming the error, and the other checks still run.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib.util
import io
import json
import os
import platform
import re
import subprocess
import sys
import textwrap
import traceback
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from sglang_aiter_plugin._status import FixStatus
    from sglang_aiter_plugin._switches import Switches

__all__ = ["Check", "Report", "collect", "describe", "render_json", "render_table"]

OK, WARN, FAIL, INFO = "ok", "warn", "FAIL", "info"
ENTRY_POINT_NAME = "aiter_ext"
EXT_NAME = "aiter-ext"  # the backend name users type
INSTALL_HINT = ("`pip install .` in a checkout of sglang-aiter-plugin, or `pip install "
                "git+<its repository URL>`; see the README")
NEED_SGLANG = "discovery, fixes, selection"  # the checks that need sglang to import
PACKAGE = "sglang_aiter_plugin"
BACKEND_FIX = f"{PACKAGE}.fixes.attention_backend.fix"
"""The plugin of the fix that makes ``aiter-ext`` selectable, as the registry names it."""
#: Every module the package ships (``tests/test_doctor.py`` holds it to the source tree): the
#: ``package`` check imports each, so a copy missing one, or one that does not import, fails.
MODULES = (
    "", "__main__", "_doctor", "_errors", "_ledger", "_log", "_patch", "_post_import", "_rebind",
    "_other_plugins", "_registration", "_releases", "_sglang", "_status", "_switches", "backend",
    "backend.bounds_check", "backend.buffers", "backend.capacity", "backend.classes",
    "backend.defects", "backend.graph_metadata", "backend.graph_state", "backend.page_table",
    "backend.pool", "backend.split_tables", "backend.widths", "cli", "fixes",
    "fixes.attention_backend",
    "fixes.attention_backend.choice", "fixes.attention_backend.fix",
    "fixes.attention_backend.sites", "fixes.collectives",
    "fixes.collectives.calls", "fixes.collectives.capture_scope", "fixes.collectives.fix",
    "fixes.collectives.plan", "fixes.collectives.probe", "fixes.collectives.readers",
    "fixes.collectives.replay", "fixes.collectives.wrappers", "plugin",
    "plugin.manager", "plugin.spec",
    "selftest", "selftest.cases", "selftest.checks", "selftest.child", "selftest.decode",
    "selftest.decode_batch", "selftest.deployment", "selftest.mlp_sync", "selftest.model_runner",
    "selftest.reference", "selftest.report", "selftest.run", "selftest.sglang_setup",
)
_T = TypeVar("_T")


@dataclass(frozen=True)
class Check:
    name: str
    level: str
    summary: str


@dataclass
class Report:
    checks: list[Check] = field(default_factory=list)

    def add(self, name: str, level: str, summary: str) -> None:
        self.checks.append(Check(name, level, summary))

    def run(self, name: str, check: Callable[..., _T], *args: Any) -> _T | None:
        """``check(self, *args)``; whatever it raises becomes a ``FAIL`` row called ``name``."""
        try:
            return check(self, *args)
        except Exception as exc:
            self.add(name, FAIL, f"doctor could not check this: {describe(exc)}")
            return None

    @property
    def exit_code(self) -> int:
        return 1 if any(c.level == FAIL for c in self.checks) else 0


def describe(exc: BaseException) -> str:
    """``Type: message`` and the file it comes from: a broken install shows where it lies."""
    text = f"{type(exc).__name__}: {exc}"
    try:
        from sglang_aiter_plugin._errors import shorten
    except Exception:  # a broken install: the whole text rather than no row
        pass
    else:
        text = shorten(text, 300, quoted=False)
    if isinstance(exc, SyntaxError):
        return f"{text} (in {exc.filename})"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith("<")]
    return f"{text} (in {frames[-1].filename}, line {frames[-1].lineno})" if frames else text


def collect(selected_backend: str | None = None) -> Report:
    """Run every probe. ``selected_backend`` is the backend the user intends to launch with."""
    report = Report()
    # sglang's plugin loader in a fresh interpreter, running while this one probes
    discovery = subprocess.Popen([sys.executable, "-c", _DISCOVERY_PROBE], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    report.run("plugin", _check_plugin)
    sglang_imports = report.run("sglang", _check_sglang)
    report.run("aiter", _check_platform, selected_backend)
    if sglang_imports is False:  # said once, in the sglang row: these checks need it
        discovery.kill()
        discovery.communicate()
        report.run("switches", _check_switches)
        report.run("package", _check_package, False)  # what is there, whatever else failed
        return report
    answers: dict[str, Any] = {}  # the fresh interpreter's answers, discovery's and the rest
    loaded = report.run("discovery", _check_discovery, discovery, answers)
    fixes = report.run("fixes", _check_fixes)
    if selected_backend is not None and fixes is not None:
        report.run("selection", _check_selection, selected_backend, bool(loaded), *fixes)
    report.run("collectives", _communicator_calls)
    report.run("collective readers", _communicator_readers)
    report.run("other plugins", _other_plugins, answers)
    report.run("package", _check_package)  # last: it imports what a launch imports later
    report.run("graph set-up", _graph_set_up)
    report.run("naming", _naming)
    return report


def _check_plugin(report: Report) -> None:
    from sglang_aiter_plugin._releases import __version__

    report.add("plugin", INFO, f"sglang-aiter-plugin {__version__}")


def _quiet(function: Callable[..., _T], *args: Any) -> _T:
    """``function(*args)``, dropping what sglang prints (off ROCm: "aiter is AMD specific") and
    the warnings its imports raise: doctor's output is the report (``--json``: one document)."""
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return function(*args)


def _check_package(report: Report, sglang_imports: bool = True) -> None:
    """Import every module in :data:`MODULES` (``__main__``: found, not run): one ``FAIL`` row
    for the modules missing from the package, one per cause that stops others importing. Where
    sglang does not import (``sglang_imports`` false), a module that stops only on sglang is
    counted, not failed: the ``sglang`` row says why."""
    where = next(iter(getattr(sys.modules.get(PACKAGE), "__path__", [])), "?")
    missing: list[str] = []
    broken: dict[str, list[str]] = {}  # cause -> the modules it stops
    need_sglang: list[str] = []
    for relative in MODULES:
        name = f"{PACKAGE}.{relative}" if relative else PACKAGE
        try:
            if relative != "__main__":
                _quiet(importlib.import_module, name)
            elif importlib.util.find_spec(name) is None:
                missing.append(name)
        except ModuleNotFoundError as exc:
            gone = exc.name or ""
            if gone == name or (gone.startswith(f"{PACKAGE}.") and name.startswith(f"{gone}.")):
                missing.append(name)
            elif not sglang_imports and _stops_on_sglang(exc):
                need_sglang.append(name)
            else:
                broken.setdefault(describe(exc), []).append(name)
        except Exception as exc:
            if not sglang_imports and _stops_on_sglang(exc):
                need_sglang.append(name)
            else:
                broken.setdefault(describe(exc), []).append(name)
    if missing:
        report.add("package", FAIL, f"missing from {where}: {', '.join(missing)}; the install "
                   f"is incomplete: reinstall the plugin ({INSTALL_HINT})")
    for cause, names in broken.items():
        verb = "does" if len(names) == 1 else "do"
        report.add("package", FAIL, f"{', '.join(names)} {verb} not import: {cause}")
    if not missing and not broken and need_sglang:
        report.add("package", OK, f"all {len(MODULES)} modules are in {where}; "
                   f"{len(MODULES) - len(need_sglang)} import, {len(need_sglang)} need sglang, "
                   "which does not import here")
    elif not missing and not broken:
        report.add("package", OK, f"all {len(MODULES)} modules import, from {where}")


_IMPORTS_SGLANG = re.compile(r"(from|import)\s+sglang(\.|\s|$)")


def _stops_on_sglang(exc: BaseException) -> bool:
    """Whether importing a module failed on importing sglang: a line of the traceback imports
    sglang (``from sglang.srt... import``), or sglang is not found."""
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").partition(".")[0] == "sglang":
        return True
    return any(_IMPORTS_SGLANG.match(f.line or "") for f in traceback.extract_tb(exc.__traceback__))


def _communicator_calls(report: Report, path: str | None = None) -> None:
    """The canary over sglang's ``parallel_state`` (``path``: its source, the installed one by
    default): a warning for each call on aiter's communicator the plugin does not know."""
    from sglang_aiter_plugin.fixes.collectives import registered
    from sglang_aiter_plugin.fixes.collectives.calls import communicator_calls, known_as
    from sglang_aiter_plugin.fixes.collectives.fix import PARALLEL_STATE

    if path is None:
        path = getattr(importlib.util.find_spec(PARALLEL_STATE), "origin", None) or "?"
    calls = communicator_calls(Path(path).read_text())
    unknown = [c for c in calls if known_as(c, registered()) is None]
    for c in unknown:
        report.add("collectives", WARN, f"GroupCoordinator.{c.method} calls aiter's "
                   f"ca_comm.{c.name} ({path}:{c.line}), which the plugin does not know: it may "
                   "register the caller's tensors during CUDA-graph capture, with no fix to take "
                   "it off that path; please report this sglang release")
    if not unknown:
        report.add("collectives", OK, f"all {len(calls)} calls sglang's GroupCoordinator makes "
                   "on aiter's communicator are known to the plugin")


def _communicator_readers(report: Report, root: str | None = None) -> None:
    """The canary over the rest of sglang (``root``: its package directory, the installed one by
    default): a warning for each function outside GroupCoordinator that reaches aiter's
    communicator and that the plugin does not know."""
    from sglang_aiter_plugin.fixes.collectives.readers import communicator_readers, known_as

    if root is None:
        root = next(iter(getattr(importlib.util.find_spec("sglang"),
                                 "submodule_search_locations", None) or []), "?")
    readers = communicator_readers(Path(root))
    unknown = [r for r in readers if known_as(r) is None]
    for r in unknown:
        report.add("collective readers", WARN, f"{r.function} ({Path(root) / r.path}:{r.line}) "
                   f"reaches aiter's communicator ({', '.join(r.reads)}) outside "
                   "GroupCoordinator, which the plugin does not know: it may capture a "
                   "registered collective that no collective fix sees; please report this "
                   "sglang release")
    if not unknown:
        report.add("collective readers", OK, f"all {len(readers)} functions outside "
                   "GroupCoordinator that reach aiter's communicator are known to the plugin")


def _other_plugins(report: Report, answers: dict[str, Any]) -> None:
    """Each other plugin of sglang's group that wraps what the plugin wraps (or the decode graph
    runner's capture), as the discovery probe's run of sglang's loader found them."""
    from sglang_aiter_plugin._errors import shorten
    from sglang_aiter_plugin._other_plugins import summaries

    if "wrappers" not in answers:
        why = answers.get("wrappers_error") or "sglang's loader did not finish (see discovery)"
        report.add("other plugins", INFO, "doctor could not tell which other plugins wrap what "
                   f"the plugin wraps: {shorten(why, 300, quoted=False)}")
        return
    warnings, ok = summaries(answers["wrappers"], os.environ.get("SGLANG_PLUGINS") or None)
    for warning in warnings:
        report.add("other plugins", WARN, warning)
    if not warnings:
        report.add("other plugins", OK, ok)


def _graph_set_up(report: Report) -> None:
    """One row per defect of upstream's AITER backend on the installed release (the ledger, as
    measured; for ``mla-split-table``, what the installed aiter's MLA decode does). What
    ``aiter-ext``'s graph set-up does about each is decided in a launch's schedulers, never in
    this process: the launch logs it."""
    from sglang_aiter_plugin._sglang import installed_sglang_version
    from sglang_aiter_plugin._status import FixState
    from sglang_aiter_plugin.backend import split_tables
    from sglang_aiter_plugin.backend.defects import defects_on

    version = installed_sglang_version()
    if version is None:
        return
    for defect in defects_on(version):
        if defect.name == split_tables.PATCH:  # decided by the installed aiter's MLA decode
            from sglang.srt.layers.attention.aiter_backend import AiterAttnBackend

            state, detail = split_tables.decide(split_tables.kernel_of(AiterAttnBackend))
            report.add(f"graph set-up {defect.name}", WARN if state is FixState.FAILED else INFO,
                       f"{defect.summary}; the installed aiter: {state.value} ({detail}); a "
                       "launch's graph set-up of an MLA model logs what it did")
            continue
        report.add(f"graph set-up {defect.name}", INFO, f"upstream aiter on sglang {version}: "
                   f"{defect.summary} (as measured); aiter-ext answers it, and a launch's "
                   "graph set-up logs what it did")


def _naming(report: Report) -> None:
    """How ``aiter-ext`` shows up in ``/server_info`` and the logs of the installed release."""
    from packaging.version import Version

    from sglang_aiter_plugin._sglang import installed_sglang_version

    common = ("--attention-backend aiter-ext is resolved as 'aiter', so every aiter-specific "
              "decision of sglang is taken as for aiter; the plugin logs one line 'resolving "
              "attention_backend 'aiter-ext' as 'aiter'' at start-up, and the backend objects are "
              "its AiterExt* classes (shown wherever sglang logs a backend's class name)")
    version = installed_sglang_version()
    if version is not None and version >= Version("0.5.19"):
        report.add("naming", INFO, f"{common}. /server_info and the post-resolution server_args "
                   "log say attention_backend 'aiter'; launch_command (and the first, "
                   "pre-resolution server_args log) keep '--attention-backend aiter-ext'")
    else:
        report.add("naming", INFO, f"{common}. This sglang release resolves arguments as they "
                   "are built, so /server_info and every server_args log say attention_backend "
                   "'aiter'")


def _check_sglang(report: Report) -> bool:
    """The installed release, and whether it imports here: what every later check needs."""
    from sglang_aiter_plugin import _sglang
    from sglang_aiter_plugin._sglang import SUPPORTED_RANGE, Support

    v = _sglang.installed_sglang_version()
    support = _sglang.support_of(v)
    if v is None:
        report.add("sglang", FAIL, f"sglang is not installed for this Python ({sys.executable}); "
                   f"supported releases: {SUPPORTED_RANGE}. Not checked without it: {NEED_SGLANG}")
        return False
    level = {Support.SUPPORTED: OK, Support.UNTESTED: WARN}.get(support, FAIL)
    summary = f"sglang {v}: {support}"
    if support == Support.UNTESTED:
        summary += "; the plugin's fixes probe behaviour, but this release was never tested"
    elif support == Support.UNSUPPORTED:
        summary += f"; supported releases: {SUPPORTED_RANGE}"
    try:
        import sglang  # noqa: F401  (what sglang's loader has done before it calls the plugin)
    except Exception as exc:
        report.add("sglang", FAIL, f"{summary}, but `import sglang` fails here: {describe(exc)}. "
                   f"Not checked while it fails: {NEED_SGLANG}")
        return False
    report.add("sglang", level, summary)
    return True


def _check_platform(report: Report, selected_backend: str | None) -> None:
    try:
        import torch
    except Exception as exc:
        report.add("platform", FAIL, f"torch does not import: {exc!r}")
        return
    hip, cuda = getattr(torch.version, "hip", None), getattr(torch.version, "cuda", None)
    where = (f"ROCm/HIP {hip}" if hip else f"CUDA {cuda} build (not ROCm)" if cuda
             else "CPU build (not ROCm)")
    report.add("platform", INFO, f"{platform.machine()}, Python {platform.python_version()}, "
               f"torch {torch.__version__}, {where}")
    from sglang_aiter_plugin.backend import aiter_problem

    problem = aiter_problem()
    if problem is None:
        report.add("aiter", OK, "import aiter works; aiter-ext can run")
    else:
        level = FAIL if selected_backend == EXT_NAME else WARN
        report.add("aiter", level, f"aiter-ext cannot run here: {problem}")


_DISCOVERY_PROBE = textwrap.dedent("""
    import json, sys
    sys.modules.setdefault("aiter", None)
    from sglang.srt import plugins
    eps = {ep.name: ep for ep in plugins.entry_points(group=plugins.GENERAL_PLUGINS_GROUP)}
    loaded = plugins.load_plugins_by_group(plugins.GENERAL_PLUGINS_GROUP,
                                           excluded_dists=plugins._get_excluded_dists())
    error = None
    if "aiter_ext" in eps and "aiter_ext" not in loaded:
        try:  # what sglang's loader met: the same load again, its error kept
            eps["aiter_ext"].load()
        except Exception as exc:
            module = sys.modules.get("sglang_aiter_plugin")
            where = getattr(module, "__file__", None) or list(getattr(module, "__path__", []))
            error = f"{type(exc).__name__}: {exc} (sglang_aiter_plugin from {where})"
    if "aiter_ext" in loaded:
        try:  # loaded, but did register() import what it needs? (it logs, never raises)
            from sglang_aiter_plugin._registration import last_statuses
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
    print(json.dumps({"found": sorted(eps), "loaded": sorted(loaded), "error": error}),
          flush=True)
    try:  # then the loader once more, as a launch runs it: who wraps what the plugin wraps
        from sglang_aiter_plugin._other_plugins import observe
        print(json.dumps({"wrappers": observe(plugins)}))
    except BaseException as exc:
        print(json.dumps({"wrappers_error": f"{type(exc).__name__}: {exc}"}))
    """)


def _failure_cause(stderr: str) -> str:
    """The loader's real failure, from the last exception line of the fresh interpreter."""
    from sglang_aiter_plugin._errors import shorten
    from sglang_aiter_plugin._releases import OLDEST_SUPPORTED
    from sglang_aiter_plugin._sglang import SUPPORTED_RANGE

    lines = [ln for ln in stderr.strip().splitlines() if re.match(r"^[A-Za-z_][\w.]*: ", ln)]
    last = lines[-1] if lines else (stderr.strip().splitlines() or ["no output"])[-1]
    if ("No module named 'sglang.srt.plugins'" in last
            or "cannot import name 'plugins' from 'sglang.srt'" in last):  # 0.5.10: no __init__
        return (f"this sglang has no plugin loader (sglang.srt.plugins appeared in "
                f"{OLDEST_SUPPORTED}); supported releases: {SUPPORTED_RANGE}")
    if "No module named 'sglang'" in last:
        return "sglang is not installed in this Python environment"
    return f"sglang's plugin loader failed: {shorten(last, 300)}"


def _answers(out: str) -> dict[str, Any]:
    """The fresh interpreter's JSON lines, merged (what it printed besides them is ignored)."""
    merged: dict[str, Any] = {}
    for line in out.strip().splitlines():
        with contextlib.suppress(ValueError):
            answer = json.loads(line)
            if isinstance(answer, dict):
                merged.update(answer)
    return merged


def _check_discovery(report: Report, proc: subprocess.Popen[str],
                     answers: dict[str, Any] | None = None) -> bool:
    """Ask sglang's own loader, in a fresh interpreter with this environment, what it loads
    (``answers``: filled with all the interpreter answered)."""
    from sglang_aiter_plugin._errors import shorten

    try:
        out, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        report.add("discovery", FAIL, "sglang's plugin loader did not finish within 300 s")
        return False
    result = _answers(out)
    if answers is not None:
        answers.update(result)
    if "found" not in result:
        report.add("discovery", FAIL, _failure_cause(err))
        return False
    if ENTRY_POINT_NAME in result["loaded"] and result["error"]:
        report.add("discovery", FAIL, f"sglang's load_plugins() loads '{ENTRY_POINT_NAME}', but "
                   f"its register() failed, so sglang is unchanged: {result['error']}")
        return False
    if ENTRY_POINT_NAME in result["loaded"]:
        report.add("discovery", OK, f"sglang's load_plugins() loads '{ENTRY_POINT_NAME}' "
                   "in a fresh process")
        return True
    if ENTRY_POINT_NAME not in result["found"]:
        report.add("discovery", FAIL, f"no '{ENTRY_POINT_NAME}' entry point in group "
                   f"sglang.srt.plugins: install the plugin ({INSTALL_HINT})")
    elif plugins := os.environ.get("SGLANG_PLUGINS"):
        report.add("discovery", FAIL, f"SGLANG_PLUGINS={shorten(plugins)} leaves "
                   f"'{ENTRY_POINT_NAME}' out; add it to the list or unset the variable")
    elif result["error"]:
        report.add("discovery", FAIL, "entry point found but sglang failed to load it: "
                   f"{shorten(result['error'], 300, quoted=False)}")
    elif platform_name := os.environ.get("SGLANG_PLATFORM"):
        report.add("discovery", FAIL, f"SGLANG_PLATFORM={shorten(platform_name)} "
                   "excludes this distribution")
    else:
        report.add("discovery", FAIL, "entry point found but sglang failed to load it")
    return False


def _check_selection(report: Report, name: str, loaded: bool, switches: Switches,
                     statuses: list[FixStatus]) -> None:
    """Whether ``--attention-backend NAME`` can be selected with this sglang and these switches."""
    from sglang_aiter_plugin import _sglang
    from sglang_aiter_plugin._errors import shorten
    from sglang_aiter_plugin._status import FixState
    from sglang_aiter_plugin._switches import DISABLE_VAR, ENABLE_VAR

    if name != EXT_NAME:
        try:
            from sglang.srt.server_args import ATTENTION_BACKEND_CHOICES as choices
        except Exception:
            choices = None
        if choices is not None and name not in choices:
            close = difflib.get_close_matches(name, [*choices, EXT_NAME], n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]!r}?" if close else "."
            report.add("selection", FAIL, f"{shorten(name)} is not an attention backend of this "
                       f"sglang{hint} The launch would fail with `invalid choice`.")
        else:
            report.add("selection", INFO, f"{shorten(name)} is sglang's own backend; the plugin "
                       "leaves it as upstream ships it")
        return
    from sglang_aiter_plugin.fixes import name_of

    fix_name = name_of(BACKEND_FIX)
    reasons = []
    support = _sglang.support_of(_sglang.installed_sglang_version())
    if support == _sglang.Support.UNSUPPORTED:
        reasons.append(f"sglang is {support} (supported releases: {_sglang.SUPPORTED_RANGE})")
    if not switches.enabled:
        reasons.append(f"the plugin is switched off ({ENABLE_VAR}=0)")
    status = next((s for s in statuses if s.name == fix_name), None)
    unready = {FixState.FAILED: "failed", FixState.PENDING: "is still pending"}
    if fix_name in switches.disabled_fixes:
        reasons.append(f"the {fix_name} fix is disabled ({DISABLE_VAR})")
    elif status is not None and status.state in unready:
        reasons.append(f"the {fix_name} fix {unready[status.state]}: {status.detail}")
    if not loaded:
        reasons.append("sglang's plugin loader does not load the plugin (see discovery)")
    if reasons:
        report.add("selection", FAIL, f"--attention-backend {EXT_NAME} cannot be selected: "
                   f"{'; '.join(reasons)}. The launch would fail with `invalid choice`.")
    elif any(c.name == "aiter" and c.level == FAIL for c in report.checks):  # what follows
        report.add("selection", FAIL, f"--attention-backend {EXT_NAME} is accepted, but the "
                   "launch stops when it resolves its arguments: aiter-ext cannot run here "
                   "(see aiter)")
    else:
        report.add("selection", OK, f"--attention-backend {EXT_NAME} can be selected")


def _check_fixes(report: Report) -> tuple[Switches, list[FixStatus]]:
    """Each fix's outcome once sglang has imported what it imports at launch."""
    from sglang_aiter_plugin._registration import last_statuses, run_fixes
    from sglang_aiter_plugin._status import FixState
    from sglang_aiter_plugin.fixes import BUILTIN_FIXES

    switches, statuses = run_fixes()
    for module in {m for s in statuses if s.state is FixState.PENDING for m in s.waiting_for}:
        try:  # what sglang's launcher and schedulers do; the pending fixes complete (or fail)
            importlib.import_module(module)
        except Exception as exc:
            report.add("fixes", WARN, f"cannot import {module} as sglang would: {exc!r}")
    fixes = {name for name, _ in BUILTIN_FIXES}  # graph set-up's statuses have their own rows
    statuses = [_classes_built(s) for s in last_statuses() or statuses if s.name in fixes]
    _check_switches(report, switches)
    for status in statuses:  # pending here: the import sglang makes at launch did not happen
        level = {FixState.FAILED: FAIL, FixState.PENDING: WARN}.get(status.state, OK)
        text = status.state.value + (f": {status.detail}" if status.detail else "")
        report.add(f"fix {status.name}", level, text)
    return switches, statuses


def _classes_built(status: FixStatus) -> FixStatus:
    """The attention-backend fix says a launch builds the plugin's classes: import them as that
    launch would; a ``failed`` status (so also for ``selection``) where they do not import."""
    from sglang_aiter_plugin._status import FixState, FixStatus
    from sglang_aiter_plugin.fixes import name_of

    if status.name != name_of(BACKEND_FIX) or status.state not in (FixState.APPLIED,
                                                                    FixState.PENDING):
        return status
    try:
        sites = _quiet(importlib.import_module, f"{PACKAGE}.fixes.attention_backend.sites")
        for stock in sites.PLUGIN_CLASSES:
            _quiet(sites.plugin_class, stock)
    except Exception as exc:
        return FixStatus(status.name, FixState.FAILED, "the plugin's classes do not import, so a "
                         f"launch with --attention-backend {EXT_NAME} fails building them: "
                         f"{describe(exc)}")
    return status


def _check_switches(report: Report, switches: Switches | None = None) -> None:
    """One row per bad switch value (reported whether the plugin is on or off), or one ok row;
    a retired fix name in ``SGLANG_AITER_EXT_DISABLE`` is noted once (not a failure)."""
    if switches is None:
        from sglang_aiter_plugin._registration import run_fixes

        switches = run_fixes()[0]
    for problem in switches.problems:
        report.add("switches", FAIL, problem)
    notes = "".join(f"; {note}" for note in switches.notes)  # retired fix names, said once
    if switches.problems and notes:
        report.add("switches", INFO, notes[2:])
    if not switches.problems:
        state = "on" if switches.enabled else "off (SGLANG_AITER_EXT=0)"
        off = ", ".join(sorted(switches.disabled_fixes)) or "none"
        check = "on" if switches.bounds_check else "off"
        report.add("switches", OK,
                   f"plugin {state}; disabled fixes: {off}; batch bounds check: {check}{notes}")


def render_table(report: Report) -> str:
    width = max(len(c.name) for c in report.checks)
    lines = [f"{c.level:<4}  {c.name:<{width}}  {c.summary}" for c in report.checks]
    verdict = "problems found" if report.exit_code else "no problems found"
    return "\n".join([*lines, "", f"doctor: {verdict}"])


def render_json(report: Report) -> str:
    return json.dumps({"ok": report.exit_code == 0, "checks": [c.__dict__ for c in report.checks]},
                      indent=2)
