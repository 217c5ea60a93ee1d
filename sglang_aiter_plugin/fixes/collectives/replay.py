"""The fourth capture condition: the ranks of a group may replay different graphs.

On HIP, sglang captures several decode graphs per batch size for some models (DSA's dense and
sparse pair from 0.5.18; DeepSeek V4.1's candidate graphs on gfx95 from 0.5.22) and each rank
picks one from its own batch at replay. Under DP attention the ranks of a group that spans DP
ranks hold different requests, so at one step they may replay different graphs; a collective
captured on the registered path bakes in the peers' buffer addresses of *its* graph's capture,
and a rank replaying the other graph reads peer buffers that are not live (sglang#36071: NaN
logits). The copy-in path goes through the communicator's pre-registered buffer, the same in
every graph.

The condition is read at capture time from what sglang is doing, on every rank alike (they run
the same capture loop): sglang marks a graph variant it is capturing (the attention variant, or
the LoRA/no-LoRA label), DP attention is on, and the group spans DP ranks (an attention-TP group
serves one DP rank's batch: its ranks replay the same graph and keep the registered path). What
cannot be read counts as the condition (the safe side). Nothing here runs outside a capture.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sglang_aiter_plugin._log import log
from sglang_aiter_plugin._patch import patches
from sglang_aiter_plugin.fixes.collectives.capture_scope import own_flag

__all__ = ["ATTENTION_MARKERS", "CAPTURE_MODE", "DP_ATTENTION", "LORA_MARKER", "RUNTIME_CONTEXT",
           "SAID", "ReplayCheck",
           "Seen", "replay_possible", "variant_marker"]

CAPTURE_MODE = "sglang.srt.model_executor.runner_utils.capture_mode"
DP_ATTENTION = "sglang.srt.layers.dp_attention"
RUNTIME_CONTEXT = "sglang.srt.runtime_context"
ATTENTION_MARKERS = ("get_capture_attention_variant",  # 0.5.20+ (layers/attention/graph_variants)
                     "get_capture_dsa_variant")  # 0.5.18-0.5.19 (the decode graph runner)
LORA_MARKER = "get_capture_lora_variant"
SAID: set[str] = set()
"""The outcomes (:class:`Seen`) this process has logged: each once, whichever fix met it."""


def variant_marker(capture_mode: Any = None) -> str | None:
    """The name of the function through which the installed sglang marks the attention graph
    variant it captures, or ``None`` where it captures one graph per batch size: read from the
    module where it is imported (or given), else from its source beside sglang's ``srt``
    package, without importing it (its imports ask the GPU questions). ``OSError`` where
    neither can be read."""
    module = capture_mode if capture_mode is not None else sys.modules.get(CAPTURE_MODE)
    if module is not None:
        return next((name for name in ATTENTION_MARKERS
                     if callable(getattr(module, name, None))), None)
    relative = Path(*CAPTURE_MODE.split(".")[2:]).with_suffix(".py")
    sources = [Path(root) / relative for root in sys.modules["sglang.srt"].__path__]
    text = next((s.read_text(encoding="utf-8") for s in sources if s.is_file()), "")
    return next((name for name in ATTENTION_MARKERS if f"\ndef {name}(" in text), None)


def replay_possible(capture_mode: Any = None) -> tuple[bool, str]:
    """Whether the installed sglang can capture graph variants (so that the condition can hold),
    and why, for a fix's status. A capture-mode module that cannot be imported now counts as
    yes (the safe side: the wrappers still read the marks at each capture)."""
    try:
        marker = variant_marker(capture_mode)
    except Exception as exc:
        return True, (f"whether this sglang captures graph variants could not be read "
                      f"({CAPTURE_MODE}: {type(exc).__name__}: {exc}), so each capture checks")
    if marker is None:
        return False, ("this sglang captures one graph per batch size, so its ranks never "
                       "replay different graphs")
    return True, (f"graph variants, marked by {marker}, under DP attention in a group spanning "
                  "DP ranks")


def _group_name(coordinator: Any) -> str:
    return str(getattr(coordinator, "unique_name", None) or getattr(coordinator, "group_name",
                                                                    None) or "?")


class Seen:
    """What the condition found at a capture, for the once-per-outcome log line."""

    ACTED = "acted"
    SGLANG = "sglang"
    ONE_GRAPH = "one-graph"


class ReplayCheck:
    """Whether a capture in a group may be replayed apart by its ranks (the module doc). Made
    where a fix decides; reads sglang's capture-mode and DP-attention modules at capture time
    (both are imported by then); ``parallel_state``: sglang's, for the attention-TP group and
    the plugin's other wrappers on ``GroupCoordinator``; ``fix`` and ``title``: the fix that
    checks it and its collective, for what it logs."""

    def __init__(self, parallel_state: Any, fix: str = "", title: str = "collectives") -> None:
        self._parallel_state = parallel_state
        self._fix, self._title = fix, title
        self._markers: tuple[Callable[[], Any], ...] | None = None

    def _marked(self) -> tuple[Callable[[], Any], ...]:
        if self._markers is None:
            module = sys.modules.get(CAPTURE_MODE)
            if module is None:  # no graph runner has imported it: nothing is marked
                return ()
            self._markers = tuple(getattr(module, name) for name in (*ATTENTION_MARKERS,
                                                                     LORA_MARKER)
                                  if callable(getattr(module, name, None)))
        return self._markers

    def variant(self) -> Any:
        """The graph variant sglang marks as being captured (``None``: none)."""
        for marker in self._marked():
            label = marker()
            if label is not None:
                return label
        return None

    @staticmethod
    def dp_attention() -> bool:
        """Whether DP attention is on (unreadable: yes, the safe side)."""
        module = sys.modules.get(DP_ATTENTION)
        try:
            return bool(module.is_dp_attention_enabled())  # type: ignore[union-attr]
        except Exception:
            return True

    def spans_dp_ranks(self, coordinator: Any) -> bool:
        """Whether ``coordinator``'s ranks are not all in this rank's attention-TP group (which
        serves one DP rank's batch); unreadable: yes, the safe side."""
        try:
            attention = self._attention_tp_group()
            return not set(coordinator.ranks) <= set(attention.ranks)
        except Exception:
            return True

    def _attention_tp_group(self) -> Any:
        """sglang's attention-TP group: its runtime context's (0.5.20+, where the module-level
        getter is deprecated), else ``parallel_state.get_attn_tp_group()``."""
        context = sys.modules.get(RUNTIME_CONTEXT)
        try:
            return context.get_parallel().attn_tp_group  # type: ignore[union-attr]
        except Exception:
            return self._parallel_state.get_attn_tp_group()

    def __call__(self, coordinator: Any, communicator: Any) -> bool:
        """Whether this capture must take the unregistered path for the condition (cheap where
        nothing is marked: one marker read, plus, until said once, the DP-attention check)."""
        variant = self.variant()
        if variant is None:
            if Seen.ONE_GRAPH not in SAID and self.dp_attention() \
                    and self.spans_dp_ranks(coordinator):
                self.seen(coordinator, Seen.ONE_GRAPH, None)
            return False
        if not (self.dp_attention() and self.spans_dp_ranks(coordinator)):
            return False
        if own_flag(communicator, "enable_register_for_capturing") is False:
            self.seen(coordinator, Seen.SGLANG, variant)
            return False
        self.seen(coordinator, Seen.ACTED, variant)
        return True

    def _others(self) -> str:
        """What the plugin's other collective fixes still do in such a capture: those with a
        wrapper on ``GroupCoordinator``."""
        cls = getattr(self._parallel_state, "GroupCoordinator", None)
        methods = vars(cls).values() if isinstance(cls, type) else ()
        found = sorted({name for value in methods for name in patches(value) if name != self._fix})
        if not found:
            return "no other collective fix of the plugin wraps GroupCoordinator"
        if len(found) == 1:
            return (f"{found[0]} still takes its collective off the registered path where its "
                    "status says sglang ignores that flag")
        return (f"{', '.join(found)} still take their collectives off the registered path where "
                "their statuses say sglang ignores that flag")

    def seen(self, coordinator: Any, outcome: str, variant: Any) -> None:
        """Say what the condition meant for a capture, once per outcome in this process."""
        if outcome in SAID:
            return
        SAID.add(outcome)
        where = f"group {_group_name(coordinator)}, which spans DP ranks under DP attention,"
        if outcome == Seen.ONE_GRAPH:
            log(logging.INFO, "sglang-aiter-plugin: %s captures one graph per batch size (sglang "
                "marks no graph variant): its ranks replay the same graph, so its collectives "
                "keep the registered path", where, always=False)
        elif outcome == Seen.SGLANG:
            log(logging.INFO, "sglang-aiter-plugin: %s captures graph variant %r, which its ranks "
                "may replay apart; the communicator's enable_register_for_capturing is off, so "
                "sglang captures its %s unregistered itself and %s leaves that to sglang; %s",
                where, variant, self._title, self._fix or "the plugin", self._others(),
                always=False)
        else:
            log(logging.INFO, "sglang-aiter-plugin: %s captures graph variant %r, which its ranks "
                "may replay apart (sglang#36071): its collectives take the unregistered "
                "(copy-in) path in these captures", where, variant, always=False)
