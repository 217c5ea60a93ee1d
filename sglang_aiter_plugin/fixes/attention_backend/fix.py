"""Fix ``attention-backend``: ``aiter-ext`` is sglang's ``aiter``, built as the plugin's classes
(its ledger: :data:`ledger`)."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from types import ModuleType

from sglang_aiter_plugin._ledger import Defect
from sglang_aiter_plugin._post_import import cancel, when_imported
from sglang_aiter_plugin._status import FixState, FixStatus
from sglang_aiter_plugin.fixes.attention_backend.choice import EXT_NAME, install_fold
from sglang_aiter_plugin.plugin.spec import FixContext, hookimpl

__all__ = ["DONE", "FIX_NAME", "REGISTRY_MODULE", "SERVER_ARGS_MODULE", "AttentionBackendFix",
           "aiter_ext_apply_fix", "ledger"]

FIX_NAME = "attention-backend"
SERVER_ARGS_MODULE = "sglang.srt.server_args"
REGISTRY_MODULE = "sglang.srt.layers.attention.attention_registry"
_DRAFT = "sglang.srt.speculative.draft_utils:DraftBackendFactory"

ledger = Defect(
    FIX_NAME, "`--attention-backend aiter-ext` is sglang's `aiter`, built as the plugin's classes",
    patches=(
        "sglang.srt.server_args:ATTENTION_BACKEND_CHOICES (aiter-ext appended, in place)",
        "sglang.srt.server_args:ServerArgs.resolve_once (0.5.19+: the fold)",
        "sglang.srt.server_args:ServerArgs.__post_init__ (0.5.11-0.5.18: the fold)",
        f"{REGISTRY_MODULE}:ATTENTION_BACKENDS['aiter']",
        f"{REGISTRY_MODULE}:ATTENTION_BACKENDS['aiter-ext'] (added; fails fast when the fold "
        "was skipped)",
        f"{_DRAFT}._create_aiter_prefill_backend",
        f"{_DRAFT}._create_aiter_decode_backend",
        "sglang.srt.layers.attention.aiter_backend:AiterMultiStepDraftBackend.__init__ (not "
        "modified: the plugin's draft class runs a copy of it that builds the plugin's "
        "children)",
    ),
    why="sglang decides by the literal name \"aiter\" in many places (28 attention decision "
        "points in 0.5.23: memory fraction, model validation, DCP, the draft factories, the "
        "backend stamp model code reads back...). A new name silently misses every one of "
        "them, or is rejected.",
    how="Two steps, each when sglang imports the module it changes (`pending` until then): on "
        "`server_args` the CLI choice and the fold (`fixes/attention_backend/choice.py`); on the "
        "backend registry, once a launch chooses `aiter-ext`, the construction sites for that "
        "choice only (`fixes/attention_backend/sites.py`).",
    upstream="none: sglang has no notion of a backend that \"is\" another backend under a "
             "second name",
    steps_aside="never: this is the plugin's reason to exist. Skipped where sglang is not "
                "installed; the canaries in `tests/fixes/attention_backend` fail when a release "
                "adds an \"aiter\" decision or a construction site the fix misses.",
    releases="0.5.11-",
)
"""This fix's entry in the plugin's ledger."""
DONE = f"`--attention-backend {EXT_NAME}` resolves as 'aiter' and builds the plugin's classes"
WHAT = {SERVER_ARGS_MODULE: "the CLI choice and the fold",
        REGISTRY_MODULE: "the backend registry entry and the EAGLE/MTP draft factories"}


class AttentionBackendFix:
    """Runs the two steps as sglang imports their modules; reports each change of status after
    :meth:`start`. Step 2 is disarmed by a resolution without ``aiter-ext`` (so the import hook
    leaves processes that never use it) and armed again by one with it."""

    def __init__(self, report: Callable[[FixStatus], None]) -> None:
        self._report = report
        self._lock = threading.RLock()
        self._done: set[str] = set()
        self._failed: str | None = None
        self._sites_wanted = False
        self._last: FixStatus | None = None
        self._run_fold = functools.partial(self._run, SERVER_ARGS_MODULE,
                                           functools.partial(install_fold, then=self._want_sites))
        self._run_sites = functools.partial(self._run, REGISTRY_MODULE, _install_sites)

    def start(self) -> FixStatus:
        """Install what can be installed now, defer the rest; the status to return now."""
        when_imported(SERVER_ARGS_MODULE, self._run_fold)
        self._want_sites(True)
        with self._lock:
            self._last = self.status()
            return self._last

    def status(self) -> FixStatus:
        with self._lock:
            if self._failed is not None:
                return FixStatus(FIX_NAME, FixState.FAILED, self._failed)
            waiting = [m for m in (SERVER_ARGS_MODULE, REGISTRY_MODULE) if m not in self._done
                       and (m == SERVER_ARGS_MODULE or self._sites_wanted)]
            if waiting:
                text = "; ".join(f"{WHAT[m]} when sglang imports {m}" for m in waiting)
                return FixStatus(FIX_NAME, FixState.PENDING, f"{DONE} once installed: {text}",
                                 waiting_for=tuple(waiting))
            if REGISTRY_MODULE in self._done:
                return FixStatus(FIX_NAME, FixState.APPLIED, DONE)
            return FixStatus(FIX_NAME, FixState.APPLIED, f"{DONE}; sglang's aiter construction "
                             f"sites are wrapped once a launch in this process chooses {EXT_NAME}")

    def _want_sites(self, wanted: bool) -> None:
        with self._lock:
            if REGISTRY_MODULE in self._done:
                return
            self._sites_wanted = wanted
        if wanted:
            when_imported(REGISTRY_MODULE, self._run_sites)
        else:
            cancel(REGISTRY_MODULE, self._run_sites)
        self._tell()

    def _run(self, module: str, step: Callable[[ModuleType], None], imported: ModuleType) -> None:
        """Run ``step`` on ``module`` (just imported, or already) unless it already ran."""
        with self._lock:
            if module in self._done:
                return
            try:
                step(imported)
            except Exception as exc:
                self._failed = self._failed or (
                    f"installing {WHAT[module]} on {module} raised {type(exc).__name__}: "
                    f"{exc}; --attention-backend {EXT_NAME} will not work")
            else:
                self._done.add(module)
        self._tell()

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


def _install_sites(registry: ModuleType) -> None:
    """Step 2 (:mod:`.sites` is imported only in a process that reaches it)."""
    from sglang_aiter_plugin.fixes.attention_backend.sites import install_construction_sites

    install_construction_sites(registry)


@hookimpl
def aiter_ext_apply_fix(context: FixContext) -> FixStatus:
    if context.sglang_version is None:
        return FixStatus(FIX_NAME, FixState.SKIPPED, "sglang is not installed")
    return AttentionBackendFix(context.report).start()
