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
    Two steps (:mod:`.steps`), each when sglang imports the module it changes (at once if it
    already has); while a step that is wanted waits, the fix reports ``pending`` and names it:
    1. on ``sglang.srt.server_args``: add ``aiter-ext`` to the shared CLI choices list, in place
       (rebinding the name has no effect from 0.5.20, where the list moved to
       ``arg_groups/choices.py``), and fold ``aiter-ext`` into ``aiter`` at the entry of
       resolution, recording the choice (:mod:`.fold`, :mod:`.marker`), so every present and
       future ``"aiter"`` test in sglang sees ``aiter``;
    2. on the backend registry, where a launch chooses ``aiter-ext``: wrap sglang's three aiter
       construction sites so they build the plugin's classes only for that choice
       (:mod:`.factories`); plain ``aiter`` users get the stock classes.
Upstream PR:
    None: sglang has no notion of a backend that "is" another backend under a second name.
Remove when:
    Never; this is the plugin's reason to exist. The canaries in ``tests/attention_backend``
    fail when a release adds an ``"aiter"`` decision or a construction site the fix misses.
"""

from __future__ import annotations

from sglang_aiter_plugin._status import FixState, FixStatus
from sglang_aiter_plugin.attention_backend.steps import NAME, Steps
from sglang_aiter_plugin.plugin import hookimpl
from sglang_aiter_plugin.plugin.spec import FixContext

__all__ = ["NAME", "aiter_ext_apply_fix"]


@hookimpl
def aiter_ext_apply_fix(context: FixContext) -> FixStatus:
    if context.sglang_version is None:
        return FixStatus(NAME, FixState.SKIPPED, "sglang is not installed")
    return Steps(context.report).start()
