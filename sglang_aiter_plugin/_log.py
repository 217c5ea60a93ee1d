"""The plugin's few log lines: through the application's handlers, or stderr until it has any."""

from __future__ import annotations

import logging

__all__ = ["log", "logger"]

logger = logging.getLogger("sglang_aiter_plugin")

_FALLBACK = logging.StreamHandler()
_FALLBACK.setFormatter(logging.Formatter("[%(asctime)s] %(levelname)s %(name)s: %(message)s"))


def log(level: int, msg: str, *args: object) -> None:
    """One of the plugin's few lines (start-up, the fold, a fix's final outcome), always shown.

    sglang configures logging only after plugins load: until then its root logger says WARNING
    (or has no handler at all), and an INFO line would vanish. So a line the level would drop
    is handed to the application's handlers anyway (or, with none, to stderr), unless someone
    set this logger's own level: ``logging.getLogger("sglang_aiter_plugin").setLevel(...)``
    silences it. Nothing is changed: no level set, no handler added, records still propagate.
    """
    if logger.level != logging.NOTSET and not logger.isEnabledFor(level):
        return  # the plugin's logger was configured explicitly: respect it
    record = logger.makeRecord(logger.name, level, __file__, 0, msg, args, None)
    if logging.getLogger().handlers or logger.handlers:
        logger.handle(record)  # handlers and filters decide; only the level check is skipped
    else:
        _FALLBACK.handle(record)
