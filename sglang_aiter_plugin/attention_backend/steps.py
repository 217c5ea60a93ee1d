"""The fix's two steps, each run when sglang imports the module it changes, and their status.

1. ``sglang.srt.server_args``: ``aiter-ext`` joins the CLI choices and the fold is installed.
2. ``sglang.srt.layers.attention.attention_registry``: sglang's aiter construction sites are
   wrapped (the registry entry, and the draft factories, ~1 ms to import after the registry).

Step 2 is needed only where a launch chooses ``aiter-ext``. It is armed at start; a resolution
without ``aiter-ext`` disarms it while it still waits, so that the import hook
(:mod:`sglang_aiter_plugin._post_import`) does not stay in processes that never use it, and a
resolution with ``aiter-ext`` (or ``SGLANG_AITER_EXT_SELECTED=1`` inherited from the launcher)
arms it again. If the registry is already imported the step runs at once.

The status says what is true now: ``pending`` (and which modules) while a step that is wanted
waits, ``applied`` once none does, ``failed`` at the first error; every change after start goes
to ``report``.
"""

from __future__ import annotations

import importlib
import os
import threading
from collections.abc import Callable
from types import ModuleType

from sglang_aiter_plugin._post_import import cancel, when_imported
from sglang_aiter_plugin._status import FixState, FixStatus
from sglang_aiter_plugin.attention_backend import marker
from sglang_aiter_plugin.attention_backend.fold import install_fold
from sglang_aiter_plugin.attention_backend.marker import EXT_NAME
from sglang_aiter_plugin.attention_backend.targets import (
    DRAFT_UTILS_MODULE,
    REGISTRY_MODULE,
    SERVER_ARGS_MODULE,
)

__all__ = ["DONE", "NAME", "Steps", "add_choice", "prepare_server_args_module"]

NAME = "attention-backend"
DONE = f"`--attention-backend {EXT_NAME}` resolves as 'aiter' and builds the plugin's classes"
WHAT = {
    SERVER_ARGS_MODULE: "the CLI choice and the fold",
    REGISTRY_MODULE: "the backend registry entry and the EAGLE/MTP draft factories",
}


def add_choice(server_args: ModuleType) -> None:
    """Add ``aiter-ext`` to the shared choices list, in place and only once."""
    choices: list[str] = server_args.ATTENTION_BACKEND_CHOICES
    if EXT_NAME not in choices:
        choices.append(EXT_NAME)


def prepare_server_args_module(server_args: ModuleType) -> None:
    """The choice and the fold: both live on ``sglang.srt.server_args``."""
    add_choice(server_args)
    install_fold(server_args.ServerArgs)


def prepare_construction_sites(registry: ModuleType) -> None:
    """The registry entry, and the draft factories: importing them costs ~1 ms after it."""
    # imported here, not at start-up: most processes never reach this step
    from sglang_aiter_plugin.attention_backend.factories import (
        install_draft_factories,
        install_registry,
    )

    install_registry(registry)
    install_draft_factories(importlib.import_module(DRAFT_UTILS_MODULE))


class Steps:
    """Runs the two steps as sglang imports their modules and keeps the fix's status."""

    def __init__(self, report: Callable[[FixStatus], None]) -> None:
        self._report = report
        self._lock = threading.RLock()
        self._done: set[str] = set()
        self._failed: str | None = None
        self._sites_wanted = False
        self._last: FixStatus | None = None
        self._run_fold = self._runner(SERVER_ARGS_MODULE, prepare_server_args_module)
        self._run_sites = self._runner(REGISTRY_MODULE, prepare_construction_sites)

    def start(self) -> FixStatus:
        """Install what can be installed now, defer the rest; the status to return now."""
        when_imported(SERVER_ARGS_MODULE, self._run_fold)
        self._want_sites(True)
        marker.on_record(self._on_choice)
        with self._lock:
            self._last = self.status()
            return self._last

    def status(self) -> FixStatus:
        with self._lock:
            if self._failed is not None:
                return FixStatus(NAME, FixState.FAILED, self._failed)
            waiting = [m for m in (SERVER_ARGS_MODULE, REGISTRY_MODULE) if m not in self._done
                       and (m == SERVER_ARGS_MODULE or self._sites_wanted)]
            if waiting:
                text = "; ".join(f"{WHAT[m]} when sglang imports {m}" for m in waiting)
                return FixStatus(NAME, FixState.PENDING, f"{DONE} once installed: {text}",
                                 waiting_for=tuple(waiting))
            if REGISTRY_MODULE in self._done:
                return FixStatus(NAME, FixState.APPLIED, DONE)
            return FixStatus(NAME, FixState.APPLIED, f"{DONE}; sglang's aiter construction "
                             f"sites are wrapped once a launch in this process chooses {EXT_NAME}")

    def _on_choice(self, selected: bool) -> None:
        self._want_sites(selected)

    def _want_sites(self, wanted: bool) -> None:
        with self._lock:
            if REGISTRY_MODULE in self._done:
                return
            inherited = os.environ.get(marker.SELECTED_ENV) == "1"
            self._sites_wanted = wanted or inherited
        if self._sites_wanted:
            when_imported(REGISTRY_MODULE, self._run_sites)
        else:
            cancel(REGISTRY_MODULE, self._run_sites)
        self._tell()

    def _runner(
        self, module: str, run: Callable[[ModuleType], None]
    ) -> Callable[[ModuleType], None]:
        def deferred_or_now(imported: ModuleType) -> None:
            with self._lock:
                if module in self._done:
                    return
                try:
                    run(imported)
                except Exception as exc:
                    self._failed = self._failed or (
                        f"installing {WHAT[module]} on {module} raised {type(exc).__name__}: "
                        f"{exc}; --attention-backend {EXT_NAME} will not work"
                    )
                else:
                    self._done.add(module)
            self._tell()

        return deferred_or_now

    def _tell(self) -> None:
        """Report a changed status, once :meth:`start` has returned the first one."""
        with self._lock:
            if self._last is None:
                return
            status = self.status()
            if status == self._last:
                return
            self._last = status
        self._report(status)
