"""``register()``'s work in every process that loads plugins: the switches, the fixes run once,
the start-up line. The statuses live on :mod:`._status`'s board (:func:`last_statuses`)."""

from __future__ import annotations

import logging
import threading

from sglang_aiter_plugin._log import log as _log
from sglang_aiter_plugin._releases import __version__
from sglang_aiter_plugin._sglang import Support, installed_sglang_version, support_of
from sglang_aiter_plugin._status import FixState, FixStatus, begin, current, report
from sglang_aiter_plugin._switches import DISABLE_VAR, ENABLE_VAR, Switches, read_switches
from sglang_aiter_plugin.fixes import BUILTIN_FIXES, retired_reasons

__all__ = ["last_statuses", "register", "run_fixes"]


_lock = threading.RLock()
_switches: Switches | None = None  # set once the fixes ran in this process
_logged = False  # the start-up line, once per process however often sglang calls register()


def run_fixes() -> tuple[Switches, list[FixStatus]]:
    """Read the switches and apply every fix once per process (re-entrant, idempotent)."""
    global _switches
    with _lock:
        if _switches is not None:
            return _switches, current() or []
        builtin = [name for name, _ in BUILTIN_FIXES]
        switches = read_switches(builtin, retired=retired_reasons())
        if not switches.enabled:  # switched off: touch nothing, not even pluggy; bad values told
            _switches = switches._replace(enabled=False, bounds_check=False)
            return _switches, begin(FixStatus(n, FixState.DISABLED, f"{ENABLE_VAR}=0")
                                    for n in builtin)
        from sglang_aiter_plugin.plugin.manager import PluginManager
        from sglang_aiter_plugin.plugin.spec import FixContext

        _switches = switches
        blocked = {name: f"listed in {DISABLE_VAR}" for name in switches.disabled_fixes}
        manager = PluginManager(BUILTIN_FIXES, blocked=blocked)
        context = FixContext(sglang_version=installed_sglang_version(), report=report)
        return _switches, begin(manager.apply_fixes(context))


last_statuses = current
"""This process's statuses as of now (:func:`._status.current`), or ``None`` if no fix ran."""


def register() -> None:
    """Entry point of the ``sglang.srt.plugins`` group. Never raises into sglang; a second call
    in the process (sglang#38464 loads plugins during argument resolution too) changes nothing
    and logs nothing."""
    global _logged
    try:
        switches, statuses = run_fixes()
        with _lock:
            if _logged:
                return
            _logged = True
        _log_summary(switches, statuses)
    except Exception:  # sglang only logs plugin errors; say it ourselves, precisely
        import traceback

        _log(logging.ERROR, "sglang-aiter-plugin %s failed to register; sglang is unchanged\n%s",
             __version__, traceback.format_exc())


def _log_summary(switches: Switches, statuses: list[FixStatus]) -> None:
    version = installed_sglang_version()
    support = support_of(version)
    fixes = "; ".join([*(str(s) for s in statuses), *switches.notes]) or "no fixes"
    _log(logging.INFO, "sglang-aiter-plugin %s on sglang %s (%s): %s", __version__,
         version or "?", support, fixes)
    for problem in switches.problems:
        _log(logging.WARNING, "sglang-aiter-plugin: %s", problem)
    if support in (Support.UNTESTED, Support.UNSUPPORTED):
        _log(logging.WARNING, "sglang-aiter-plugin: sglang %s is %s; run `sglang-aiter-plugin "
             "doctor`", version, support)
    for status in statuses:
        if status.state is FixState.FAILED:
            _log(logging.WARNING, "sglang-aiter-plugin: fix %s failed: %s", status.name,
                 status.detail)
