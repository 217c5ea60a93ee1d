"""Fix ``attention-backend``: ``aiter-ext`` is sglang's ``aiter``, built as the plugin's classes.

Why:
    sglang decides by the literal name ``"aiter"`` in many places (28 attention decision points
    in 0.5.23: the long-context memory fraction, GPT-OSS/Llama-4/Gemma-4 validation, Kimi-K3 DCP,
    dLLM, the DeepSeek handler registry, the MLA DCP LSE base, fused RoPE on gfx95, the EAGLE/MTP
    draft factories, the backend stamp model code reads back). A new name silently misses
    every one of them -- some silently wrong outputs -- or is rejected.
How:
    Three steps, each when its sglang module is first imported (or at once if it already is):
    * add ``aiter-ext`` to the shared CLI choices list, in place (rebinding the name has no
      effect from 0.5.20, where the list moved to ``arg_groups/choices.py``);
    * fold ``aiter-ext`` into ``aiter`` at the entry of resolution and record the choice on the
      record and in the environment (:mod:`sglang_aiter_plugin.selection.fold`), so every
      present and future ``"aiter"`` test in sglang sees ``aiter``;
    * wrap sglang's three aiter construction sites so they build the plugin's classes only when
      ``aiter-ext`` was chosen (:mod:`sglang_aiter_plugin.selection.factories`); plain ``aiter``
      users get the stock classes. ``ATTENTION_BACKENDS['aiter-ext']`` fails fast if a launch
      path skipped the fold.
Upstream PR:
    None: sglang has no notion of a backend that "is" another backend under a second name.
Remove when:
    Never; this is the plugin's reason to exist.
"""

from __future__ import annotations

from types import ModuleType

from sglang_aiter_plugin._post_import import when_imported
from sglang_aiter_plugin._status import FixState, FixStatus
from sglang_aiter_plugin.plugin import hookimpl
from sglang_aiter_plugin.plugin.spec import FixContext
from sglang_aiter_plugin.selection import (
    EXT_NAME,
    install_draft_factories,
    install_fold,
    install_registry,
)

__all__ = ["BACKEND_NAME", "add_choice", "aiter_ext_apply_fix", "prepare_server_args_module"]

NAME = "attention-backend"
BACKEND_NAME = EXT_NAME
SERVER_ARGS_MODULE = "sglang.srt.server_args"
REGISTRY_MODULE = "sglang.srt.layers.attention.attention_registry"
DRAFT_UTILS_MODULE = "sglang.srt.speculative.draft_utils"


def add_choice(server_args: ModuleType) -> None:
    """Add ``aiter-ext`` to the shared choices list, in place and only once."""
    choices: list[str] = server_args.ATTENTION_BACKEND_CHOICES
    if BACKEND_NAME not in choices:
        choices.append(BACKEND_NAME)


def prepare_server_args_module(server_args: ModuleType) -> None:
    """The choice and the fold: both live on ``sglang.srt.server_args``."""
    add_choice(server_args)
    install_fold(server_args.ServerArgs)


@hookimpl
def aiter_ext_apply_fix(context: FixContext) -> FixStatus:
    if context.sglang_version is None:
        return FixStatus(NAME, FixState.SKIPPED, "sglang is not installed")
    now = [
        when_imported(SERVER_ARGS_MODULE, prepare_server_args_module),
        when_imported(REGISTRY_MODULE, install_registry),
        when_imported(DRAFT_UTILS_MODULE, install_draft_factories),
    ]
    when = "now" if all(now) else "as sglang imports its modules"
    return FixStatus(
        NAME,
        FixState.APPLIED,
        f"`--attention-backend {BACKEND_NAME}` resolves as 'aiter' and builds the plugin's "
        f"classes (installed {when})",
    )
