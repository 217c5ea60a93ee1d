"""sglang-aiter-plugin: the ``aiter-ext`` attention backend and a TMS-safe AITER reduce-scatter.

sglang discovers the plugin through the ``sglang.srt.plugins`` entry point and calls
:func:`register` in every process that loads plugins. Importing this package is cheap: nothing
ROCm-specific and no sglang module is imported until :func:`register` runs.
"""

from __future__ import annotations

from sglang_aiter_plugin._registration import register
from sglang_aiter_plugin._status import FixState, FixStatus
from sglang_aiter_plugin._version import __version__

__all__ = ["FixState", "FixStatus", "__version__", "register"]
