"""Fix ``attention-backend``: ``aiter-ext`` is sglang's ``aiter``, built as the plugin's classes.

Patches (``module:qualname``; the table is :data:`~.targets.TARGETS`):
    * ``sglang.srt.server_args:ATTENTION_BACKEND_CHOICES`` -- ``aiter-ext`` appended, in place;
    * ``sglang.srt.server_args:ServerArgs.resolve_once`` (0.5.19+) -- wrapped: the fold;
    * ``sglang.srt.server_args:ServerArgs.__post_init__`` (0.5.11-0.5.18) -- wrapped: the fold;
    * ``sglang.srt.layers.attention.attention_registry:ATTENTION_BACKENDS['aiter']`` -- wrapped;
    * ``sglang.srt.layers.attention.attention_registry:ATTENTION_BACKENDS['aiter-ext']`` --
      added, fails fast when the fold was skipped;
    * ``sglang.srt.speculative.draft_utils:DraftBackendFactory._create_aiter_prefill_backend``
      -- wrapped;
    * ``sglang.srt.speculative.draft_utils:DraftBackendFactory._create_aiter_decode_backend``
      -- wrapped;
    * ``sglang.srt.layers.attention.aiter_backend:AiterMultiStepDraftBackend.__init__`` -- not
      modified: the plugin's draft class runs a copy of it that builds the plugin's children.
Why:
    sglang decides by the literal name ``"aiter"`` in many places (28 attention decision points
    in 0.5.23: the long-context memory fraction, GPT-OSS/Llama-4/Gemma-4 validation, Kimi-K3 DCP,
    dLLM, the DeepSeek handler registry, the MLA DCP LSE base, fused RoPE on gfx95, the EAGLE/MTP
    draft factories, the backend stamp model code reads back). A new name silently misses
    every one of them -- some silently wrong outputs -- or is rejected.
How:
    Two steps, each when its sglang module is first imported (or at once if it already is, as
    in sglang's launcher); until both ran the fix reports ``pending`` and names what it waits for:
    * add ``aiter-ext`` to the shared CLI choices list, in place (rebinding the name has no
      effect from 0.5.20, where the list moved to ``arg_groups/choices.py``);
    * fold ``aiter-ext`` into ``aiter`` at the entry of resolution and record the choice
      (:mod:`.fold`, :mod:`.marker`), so every present and future ``"aiter"`` test in sglang
      sees ``aiter``;
    * with the backend registry, wrap sglang's three aiter construction sites so they build the
      plugin's classes only when ``aiter-ext`` was chosen (:mod:`.factories`); plain ``aiter``
      users get the stock classes.
Upstream PR:
    None: sglang has no notion of a backend that "is" another backend under a second name.
Remove when:
    Never; this is the plugin's reason to exist. The canaries in ``tests/attention_backend``
    fail when a release adds an ``"aiter"`` decision or a construction site the fix misses.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Callable
from types import ModuleType

from sglang_aiter_plugin._post_import import when_imported
from sglang_aiter_plugin._status import FixState, FixStatus
from sglang_aiter_plugin.attention_backend.factories import (
    install_draft_factories,
    install_registry,
)
from sglang_aiter_plugin.attention_backend.fold import install_fold
from sglang_aiter_plugin.attention_backend.marker import EXT_NAME
from sglang_aiter_plugin.attention_backend.targets import (
    DRAFT_UTILS_MODULE,
    REGISTRY_MODULE,
    SERVER_ARGS_MODULE,
)
from sglang_aiter_plugin.plugin import hookimpl
from sglang_aiter_plugin.plugin.spec import FixContext

__all__ = ["NAME", "add_choice", "aiter_ext_apply_fix", "prepare_server_args_module"]

NAME = "attention-backend"
DONE = (
    f"`--attention-backend {EXT_NAME}` resolves as 'aiter' and builds the plugin's classes"
)


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
    install_registry(registry)
    install_draft_factories(importlib.import_module(DRAFT_UTILS_MODULE))


#: (module, step, what the step installs) in the order sglang imports the modules.
STEPS: tuple[tuple[str, Callable[[ModuleType], None], str], ...] = (
    (SERVER_ARGS_MODULE, prepare_server_args_module, "the CLI choice and the fold"),
    (REGISTRY_MODULE, prepare_construction_sites,
     "the backend registry entry and the EAGLE/MTP draft factories"),
)


class _Progress:
    """Which steps ran: ``applied`` once the last one did, ``failed`` at the first error."""

    def __init__(self, report: Callable[[FixStatus], None]) -> None:
        self._report = report
        self._lock = threading.Lock()
        self._waiting = {module: what for module, _, what in STEPS}
        self._failed: str | None = None
        self._started = False
        self._settled = False

    def step(self, module: str, run: Callable[[ModuleType], None]) -> Callable[[ModuleType], None]:
        def deferred_or_now(imported: ModuleType) -> None:
            try:
                run(imported)
            except Exception as exc:
                with self._lock:
                    self._failed = self._failed or (
                        f"installing {self._waiting.get(module, module)} on {module} raised "
                        f"{type(exc).__name__}: {exc}; --attention-backend {EXT_NAME} will not work"
                    )
            else:
                with self._lock:
                    self._waiting.pop(module, None)
            self._settle_if_final()

        return deferred_or_now

    def status(self) -> FixStatus:
        with self._lock:
            if self._failed is not None:
                return FixStatus(NAME, FixState.FAILED, self._failed)
            if not self._waiting:
                return FixStatus(NAME, FixState.APPLIED, DONE)
            waiting = "; ".join(f"{what} when sglang imports {module}"
                                for module, what in self._waiting.items())
            return FixStatus(NAME, FixState.PENDING, f"{DONE} once installed: {waiting}",
                             waiting_for=tuple(self._waiting))

    def start(self) -> FixStatus:
        """The status to return now; later outcomes go through ``report``."""
        status = self.status()
        with self._lock:
            self._settled = status.state is not FixState.PENDING
            self._started = True
        return status

    def _settle_if_final(self) -> None:
        status = self.status()
        with self._lock:
            if not self._started:
                return  # still inside aiter_ext_apply_fix: its return value says it
            if self._settled:
                return
            self._settled = status.state is not FixState.PENDING
        self._report(status)


@hookimpl
def aiter_ext_apply_fix(context: FixContext) -> FixStatus:
    if context.sglang_version is None:
        return FixStatus(NAME, FixState.SKIPPED, "sglang is not installed")
    progress = _Progress(context.report)
    for module, run, _ in STEPS:
        when_imported(module, progress.step(module, run))
    return progress.start()
