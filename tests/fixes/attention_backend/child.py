"""What a ``spawn`` child of the launcher does with the record, in sglang's order.

A scheduler receives the pickled ``ServerArgs``, then calls ``load_plugins()``, then builds its
model runner. This target does the same and reports what the plugin sees there.
"""

from __future__ import annotations

import pickle
import sys
from typing import Any


def _resolved(record: Any) -> Any:
    """What sglang's runtime reads: the resolved view where the release has one."""
    import importlib

    for module in ("sglang.srt.arg_groups.model_override_base", "sglang.srt.arg_groups.overrides"):
        try:
            view = getattr(importlib.import_module(module), "resolved_view", None)
        except ImportError:
            continue
        if view is not None:
            return view(record)
    return record


def _published(record: Any) -> dict[str, Any] | None:
    """What the runtime reads after ``publish`` (0.5.17+), or ``None`` where there is none."""
    import importlib

    try:
        context: Any = importlib.import_module("sglang.srt.runtime_context")
    except ImportError:  # before 0.5.14
        return None
    if not (hasattr(context, "publish") and hasattr(context, "attention_backends")):
        return None
    try:
        context.publish(record, role="tokenizer")
        published: dict[str, Any] = {"backends": list(context.attention_backends())}
        leaf = getattr(context.get_context(), "config_leaf", None)
        if leaf is not None:
            published["mem_fraction_static"] = leaf("mem_fraction_static")
        return published
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


def report(payload: bytes, queue: Any) -> None:
    sys.modules.setdefault("aiter", None)  # type: ignore[arg-type]
    try:
        record = pickle.loads(payload)
        from sglang.srt.plugins import load_plugins

        load_plugins()
        import os

        from sglang.srt.layers.attention.attention_registry import ATTENTION_BACKENDS
        from sglang.srt.speculative.draft_utils import DraftBackendFactory

        from sglang_aiter_plugin.fixes.attention_backend.choice import (
            MARKER_ATTR,
            SELECTED_ENV,
            is_selected,
        )

        queue.put(
            {
                "marker": getattr(record, MARKER_ATTR, None),
                "env": os.environ.get(SELECTED_ENV),
                "attention_backend": _resolved(record).attention_backend,
                "finished": getattr(record, "_resolution_finished", None),
                "published": _published(record),
                "selected": is_selected(record),
                # a path that lost the record's bookkeeping: only the environment is left
                "selected_without_marker": is_selected(None),
                "registry_wrapped": hasattr(ATTENTION_BACKENDS["aiter"], "__wrapped__"),
                "draft_wrapped": hasattr(
                    DraftBackendFactory._create_aiter_decode_backend, "__wrapped__"
                ),
            }
        )
    except BaseException as exc:  # report, do not hang the parent
        queue.put({"error": f"{type(exc).__name__}: {exc}"})
