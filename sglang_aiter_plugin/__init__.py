"""sglang-aiter-plugin: the ``aiter-ext`` attention backend and capture-safe AITER collectives.

sglang discovers the plugin through the ``sglang.srt.plugins`` entry point and calls
:func:`register` in every process that loads plugins. Importing this package costs next to
nothing: the registry, sglang and anything ROCm-specific load only when :func:`register` runs
(and sglang's own modules only when sglang imports them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sglang_aiter_plugin._errors import AiterExtError
    from sglang_aiter_plugin._status import FixState, FixStatus

__all__ = ["AiterExtError", "FixState", "FixStatus", "__version__", "register"]


def register() -> None:
    """Entry point of the ``sglang.srt.plugins`` group. Never raises into sglang, even when a
    module of the package does not import (a broken install): it logs why, and changes nothing."""
    try:
        from sglang_aiter_plugin._registration import register as _register
    except Exception:
        import logging
        import traceback

        why = traceback.format_exc()
        msg = "sglang-aiter-plugin failed to register; sglang is unchanged\n%s"
        try:
            from sglang_aiter_plugin._log import log
        except Exception:  # the install is broken down to its log route
            logging.getLogger(__name__).error(msg, why)
        else:
            log(logging.ERROR, msg, why)
        return
    _register()


_LAZY = {"__version__": "_releases", "AiterExtError": "_errors", "FixState": "_status",
         "FixStatus": "_status"}


def __getattr__(name: str) -> Any:
    import importlib

    if name not in _LAZY:
        from sglang_aiter_plugin._errors import PluginAttributeError

        raise PluginAttributeError(f"module 'sglang_aiter_plugin' has no attribute {name!r}")

    return getattr(importlib.import_module(f"sglang_aiter_plugin.{_LAZY[name]}"), name)
