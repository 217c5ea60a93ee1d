"""``register()``: what sglang's plugin loader calls in every process that loads plugins."""

from __future__ import annotations

import logging
import threading

from sglang_aiter_plugin._sglang import Support, installed_sglang_version, support_of
from sglang_aiter_plugin._status import FixState, FixStatus
from sglang_aiter_plugin._switches import ENABLE_VAR, Switches, read_switches
from sglang_aiter_plugin._version import __version__
from sglang_aiter_plugin.fixes import BUILTIN_FIXES

__all__ = ["last_statuses", "register", "run_fixes"]

logger = logging.getLogger("sglang_aiter_plugin")

_lock = threading.RLock()
_statuses: list[FixStatus] | None = None


def run_fixes() -> tuple[Switches, list[FixStatus]]:
    """Read the switches and apply every fix once per process (re-entrant, idempotent)."""
    global _statuses
    builtin = [name for name, _ in BUILTIN_FIXES]
    switches = read_switches(builtin)
    if not switches.enabled:
        # Switched off: touch nothing, not even the plugin manager (pluggy, entry-point scan);
        # third-party fix names are unknown then, so the disable list is not checked.
        switches = Switches(enabled=False, disabled_fixes=switches.disabled_fixes)
        with _lock:
            if _statuses is None:
                _statuses = [FixStatus(n, FixState.DISABLED, f"{ENABLE_VAR}=0") for n in builtin]
            return switches, list(_statuses)
    from sglang_aiter_plugin.plugin.manager import get_manager
    from sglang_aiter_plugin.plugin.spec import FixContext

    manager = get_manager()
    switches = read_switches(manager.fix_names())
    with _lock:
        if _statuses is None:
            context = FixContext(
                plugin_version=__version__, sglang_version=installed_sglang_version()
            )
            _statuses = manager.apply_fixes(context, switches)
        return switches, list(_statuses)


def last_statuses() -> list[FixStatus] | None:
    """The statuses of this process's ``register()``, or ``None`` if it has not run."""
    with _lock:
        return None if _statuses is None else list(_statuses)


def register() -> None:
    """Entry point of the ``sglang.srt.plugins`` group. Never raises into sglang."""
    try:
        switches, statuses = run_fixes()
        _log_summary(switches, statuses)
    except Exception:  # sglang only logs plugin errors; say it ourselves, precisely
        _ensure_visible_logging()
        logger.exception(
            "sglang-aiter-plugin %s failed to register; sglang is unchanged", __version__
        )


def _log_summary(switches: Switches, statuses: list[FixStatus]) -> None:
    _ensure_visible_logging()
    sglang_version = installed_sglang_version()
    support = support_of(sglang_version)
    fixes = "; ".join(str(s) for s in statuses) or "no fixes"
    logger.info(
        "sglang-aiter-plugin %s on sglang %s (%s): %s",
        __version__,
        sglang_version or "?",
        support,
        fixes,
    )
    for problem in switches.problems:
        logger.warning("sglang-aiter-plugin: %s", problem)
    if support in (Support.UNTESTED, Support.UNSUPPORTED):
        logger.warning(
            "sglang-aiter-plugin: sglang %s is %s; run `sglang-aiter-plugin doctor`",
            sglang_version,
            support,
        )
    for status in statuses:
        if status.state is FixState.FAILED:
            logger.warning("sglang-aiter-plugin: fix %s failed: %s", status.name, status.detail)


def _ensure_visible_logging() -> None:
    """Make the plugin's INFO line visible in sglang's processes.

    sglang configures logging only after plugins load (and at import leaves the root logger at
    WARNING), so an INFO line would be dropped. Raise only this logger's own level, and add a
    handler only when nothing at all is configured; an explicit configuration of this logger wins.
    """
    if logger.level == logging.NOTSET and logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)
    if logger.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(levelname)s %(name)s: %(message)s"))
    logger.addHandler(handler)
    logger.propagate = False
