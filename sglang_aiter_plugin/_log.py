"""The plugin's few log lines: through the application's handlers, or stderr until it has any."""

from __future__ import annotations

import logging

__all__ = ["log", "logger"]

logger = logging.getLogger("sglang_aiter_plugin")

_FALLBACK = logging.StreamHandler()
_FALLBACK.setFormatter(logging.Formatter("[%(asctime)s] %(levelname)s %(name)s: %(message)s"))


def log(level: int, msg: str, *args: object) -> None:
    """One of the plugin's few lines, shown although sglang configures logging only after plugins
    load: a line the root level would drop still goes to the application's handlers (with none,
    to stderr), unless this logger's own level was set. No level or handler is changed."""
    if logger.level != logging.NOTSET and not logger.isEnabledFor(level):
        return  # the plugin's logger was configured explicitly: respect it
    record = logger.makeRecord(logger.name, level, __file__, 0, msg, args, None)
    if logging.getLogger().handlers or logger.handlers:
        logger.handle(record)  # handlers and filters decide; only the level check is skipped
    else:
        _FALLBACK.handle(record)
