"""Fix ``attention-backend``: make ``--attention-backend aiter-ext`` a backend sglang can build.

Why:
    sglang validates ``--attention-backend``/``--prefill-attention-backend``/
    ``--decode-attention-backend`` against one shared list and builds backends from the
    ``ATTENTION_BACKENDS`` registry; an unknown name is ``invalid choice`` at parse time and
    ``Invalid attention backend`` at runtime.
How:
    Append ``aiter-ext`` to ``ATTENTION_BACKEND_CHOICES`` in place (rebinding the name has no
    effect from 0.5.20, where the list moved to ``arg_groups/choices.py``), and register a factory
    under ``aiter-ext``. Both happen when the sglang module is first imported (or at once if it
    already is), so loading the plugin costs nothing in processes that never build a backend.
Upstream PR:
    None: sglang offers exactly these extension points for out-of-tree backends.
Remove when:
    Never; this is the plugin's reason to exist.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from sglang_aiter_plugin._post_import import when_imported
from sglang_aiter_plugin._status import FixState, FixStatus
from sglang_aiter_plugin.plugin import hookimpl
from sglang_aiter_plugin.plugin.spec import FixContext

__all__ = ["BACKEND_NAME", "add_choice", "aiter_ext_apply_fix", "register_factory"]

NAME = "attention-backend"
BACKEND_NAME = "aiter-ext"
SERVER_ARGS_MODULE = "sglang.srt.server_args"
REGISTRY_MODULE = "sglang.srt.layers.attention.attention_registry"


def add_choice(server_args: ModuleType) -> None:
    """Add ``aiter-ext`` to the shared choices list, in place and only once."""
    choices: list[str] = server_args.ATTENTION_BACKEND_CHOICES
    if BACKEND_NAME not in choices:
        choices.append(BACKEND_NAME)


def create_aiter_ext_backend(runner: Any) -> Any:
    """The ``ATTENTION_BACKENDS['aiter-ext']`` factory: build the plugin's backend."""
    from sglang_aiter_plugin.backend import create_backend

    return create_backend(runner)


def register_factory(registry: ModuleType) -> None:
    """Register the factory under ``aiter-ext`` (a dict entry, so repeated calls leave one)."""
    backends: dict[str, Any] = registry.ATTENTION_BACKENDS
    if backends.get(BACKEND_NAME) is not create_aiter_ext_backend:
        registry.register_attention_backend(BACKEND_NAME)(create_aiter_ext_backend)


@hookimpl
def aiter_ext_apply_fix(context: FixContext) -> FixStatus:
    if context.sglang_version is None:
        return FixStatus(NAME, FixState.SKIPPED, "sglang is not installed")
    now_choice = when_imported(SERVER_ARGS_MODULE, add_choice)
    now_factory = when_imported(REGISTRY_MODULE, register_factory)
    when = "now" if now_choice and now_factory else "when sglang imports its argument modules"
    return FixStatus(NAME, FixState.APPLIED, f"`--attention-backend {BACKEND_NAME}` added {when}")
