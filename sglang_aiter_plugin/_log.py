"""The plugin's log lines: through the application's logging, or stderr before there is any."""

from __future__ import annotations

import logging

__all__ = ["log", "logger"]

logger = logging.getLogger("sglang_aiter_plugin")

_FALLBACK = logging.StreamHandler()
_FALLBACK.setFormatter(logging.Formatter("[%(asctime)s] %(levelname)s %(name)s: %(message)s"))


def log(level: int, msg: str, *args: object) -> None:
    """Log through the application's logging; until it has any, straight to stderr.

    sglang configures logging only after plugins load, so at that moment nothing would print the
    plugin's INFO line. Then, and only then, the record goes to a private stderr handler. The
    plugin never sets a level or adds a handler: once the application configures logging, its
    levels and handlers decide.
    """
    if logging.getLogger().handlers or logger.handlers:
        logger.log(level, msg, *args)
        return
    record = logger.makeRecord(logger.name, level, __file__, 0, msg, args, None)
    _FALLBACK.handle(record)
