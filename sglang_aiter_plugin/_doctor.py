"""``sglang-aiter-plugin doctor``: what this machine, this sglang and this plugin will do.

Every line comes from a probe that ran now: package metadata, a fresh interpreter running
sglang's own plugin loader, the fixes applied in this process. Nothing is assumed.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import textwrap
from dataclasses import dataclass, field

from packaging.version import Version

from sglang_aiter_plugin._sglang import Support, installed_sglang_version, support_of
from sglang_aiter_plugin._status import FixState
from sglang_aiter_plugin._version import __version__

__all__ = ["Check", "Report", "collect", "naming_note", "render_json", "render_table"]

OK, WARN, FAIL, INFO = "ok", "warn", "FAIL", "info"
ENTRY_POINT_NAME = "aiter_ext"


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

    @property
    def exit_code(self) -> int:
        return 1 if any(c.level == FAIL for c in self.checks) else 0


def collect(selected_backend: str | None = None) -> Report:
    """Run every probe. ``selected_backend`` is the backend the user intends to launch with."""
    report = Report()
    report.add("plugin", INFO, f"sglang-aiter-plugin {__version__}")
    _check_sglang(report)
    _check_platform(report, selected_backend)
    _check_discovery(report)
    _check_fixes(report)
    report.add("naming", INFO, naming_note(installed_sglang_version()))
    return report


def naming_note(version: Version | None) -> str:
    """How ``aiter-ext`` shows up in ``/server_info`` and the logs of this sglang release."""
    common = (
        "--attention-backend aiter-ext is resolved as 'aiter', so every aiter-specific decision "
        "of sglang is taken as for aiter; the plugin logs one line 'resolving attention_backend "
        "'aiter-ext' as 'aiter'' at start-up, and the backend objects are its AiterExt* classes "
        "(shown wherever sglang logs a backend's class name)"
    )
    if version is not None and version >= Version("0.5.19"):
        return (
            f"{common}. /server_info and the post-resolution server_args log say "
            "attention_backend 'aiter'; launch_command (and the first, pre-resolution "
            "server_args log) keep '--attention-backend aiter-ext'"
        )
    return (
        f"{common}. This sglang release resolves arguments as they are built, so "
        "/server_info and every server_args log say attention_backend 'aiter'"
    )


def _check_sglang(report: Report) -> None:
    v = installed_sglang_version()
    support = support_of(v)
    level = {Support.SUPPORTED: OK, Support.UNTESTED: WARN}.get(support, FAIL)
    summary = f"sglang {v or '-'}: {support}"
    if support is Support.UNTESTED:
        summary += "; the plugin's fixes probe behaviour, but this release was never tested"
    elif support in (Support.UNSUPPORTED, Support.MISSING):
        summary += "; supported releases: 0.5.11 to 0.5.23"
    report.add("sglang", level, summary)


def _check_platform(report: Report, selected_backend: str | None) -> None:
    try:
        import torch
    except Exception as exc:
        report.add("platform", FAIL, f"torch does not import: {exc!r}")
        return
    hip = getattr(torch.version, "hip", None)
    cuda = getattr(torch.version, "cuda", None)
    if hip:
        where = f"ROCm/HIP {hip}"
    elif cuda:
        where = f"CUDA {cuda} build (not ROCm)"
    else:
        where = "CPU build (not ROCm)"
    report.add("platform", INFO, f"{platform.machine()}, Python {platform.python_version()}, "
               f"torch {torch.__version__}, {where}")
    from sglang_aiter_plugin.backend._availability import aiter_problem

    problem = aiter_problem()
    if problem is None:
        report.add("aiter", OK, "import aiter works; aiter-ext can run")
    else:
        level = FAIL if selected_backend == "aiter-ext" else WARN
        report.add("aiter", level, f"aiter-ext cannot run here: {problem}")


_DISCOVERY_PROBE = textwrap.dedent(
    """
    import json, sys
    sys.modules.setdefault("aiter", None)
    from sglang.srt import plugins
    found = {ep.name: ep.value for ep in plugins.entry_points(group=plugins.GENERAL_PLUGINS_GROUP)}
    loaded = plugins.load_plugins_by_group(plugins.GENERAL_PLUGINS_GROUP,
                                           excluded_dists=plugins._get_excluded_dists())
    print(json.dumps({"found": found, "loaded": sorted(loaded)}))
    """
)


def _check_discovery(report: Report) -> None:
    """Ask sglang's own loader, in a fresh interpreter with this environment, what it loads."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _DISCOVERY_PROBE],
            capture_output=True, text=True, timeout=300, env=dict(os.environ),
        )
        result = json.loads(proc.stdout.strip().splitlines()[-1])
    except Exception as exc:
        report.add("discovery", FAIL, f"could not run sglang's plugin loader: {exc!r}")
        return
    if ENTRY_POINT_NAME in result["loaded"]:
        report.add("discovery", OK, f"sglang's load_plugins() loads '{ENTRY_POINT_NAME}' "
                   "in a fresh process")
    elif ENTRY_POINT_NAME not in result["found"]:
        report.add("discovery", FAIL, "no 'aiter_ext' entry point in group sglang.srt.plugins: "
                   "reinstall with `pip install sglang-aiter-plugin`")
    elif os.environ.get("SGLANG_PLUGINS"):
        report.add("discovery", FAIL, f"SGLANG_PLUGINS={os.environ['SGLANG_PLUGINS']!r} leaves "
                   f"'{ENTRY_POINT_NAME}' out; add it to the list or unset the variable")
    elif os.environ.get("SGLANG_PLATFORM"):
        report.add("discovery", FAIL, f"SGLANG_PLATFORM={os.environ['SGLANG_PLATFORM']!r} "
                   "excludes this distribution")
    else:
        report.add("discovery", FAIL, "entry point found but sglang failed to load it")


def _import_collective_modules() -> None:
    """As in a process that runs collectives: the collective fixes then decide at once."""
    import importlib

    for module in ("sglang.srt.distributed.parallel_state",
                   "sglang.srt.distributed.device_communicators.custom_all_reduce"):
        try:
            importlib.import_module(module)
        except Exception:  # no sglang, or a broken one: the fixes report it themselves
            return


def _check_fixes(report: Report) -> None:
    from sglang_aiter_plugin._registration import run_fixes

    _import_collective_modules()
    switches, statuses = run_fixes()
    for problem in switches.problems:
        report.add("switches", FAIL, problem)
    if not switches.problems:
        state = "on" if switches.enabled else "off (SGLANG_AITER_EXT=0)"
        off = ", ".join(sorted(switches.disabled_fixes)) or "none"
        check = "on" if switches.bounds_check else "off"
        report.add(
            "switches", OK, f"plugin {state}; disabled fixes: {off}; batch bounds check: {check}"
        )
    for status in statuses:
        level = FAIL if status.state is FixState.FAILED else OK
        text = status.state.value + (f": {status.detail}" if status.detail else "")
        report.add(f"fix {status.name}", level, text)


def render_table(report: Report) -> str:
    width = max(len(c.name) for c in report.checks)
    lines = [f"{c.level:<4}  {c.name:<{width}}  {c.summary}" for c in report.checks]
    verdict = "problems found" if report.exit_code else "no problems found"
    return "\n".join([*lines, "", f"doctor: {verdict}"])


def render_json(report: Report) -> str:
    return json.dumps(
        {
            "ok": report.exit_code == 0,
            "checks": [c.__dict__ for c in report.checks],
        },
        indent=2,
    )
