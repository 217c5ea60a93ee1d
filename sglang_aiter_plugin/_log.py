"""The plugin's one logging route: every line it logs goes through :func:`log`, on the
``sglang_aiter_plugin`` logger, through the application's handlers (or stderr until it has any)."""

from __future__ import annotations

import logging
import sys

__all__ = ["log", "logger"]

logger = logging.getLogger("sglang_aiter_plugin")

_FALLBACK = logging.StreamHandler()
_FALLBACK.setFormatter(logging.Formatter("[%(asctime)s] %(levelname)s %(name)s: %(message)s"))


def log(level: int, msg: str, *args: object, exc_info: bool = False, always: bool = True) -> None:
    """One line of the plugin (``exc_info``: with the exception being handled).

    ``always`` (the plugin's few lines: start-up, the fold, a fix's final outcome, a failure):
    shown although sglang configures logging only after plugins load, so a line the root level
    would drop still goes to the application's handlers (with none, to stderr), unless this
    logger's own level was set. Otherwise (details, and lines logged once sglang has configured
    logging) the logging configuration decides, as for any logger. No level or handler is
    changed."""
    if not always:
        logger.log(level, msg, *args, exc_info=exc_info)
        return
    if logger.level != logging.NOTSET and not logger.isEnabledFor(level):
        return  # the plugin's logger was configured explicitly: respect it
    record = logger.makeRecord(logger.name, level, __file__, 0, msg, args,
                               sys.exc_info() if exc_info else None)
    if logging.getLogger().handlers or logger.handlers:
        logger.handle(record)  # handlers and filters decide; only the level check is skipped
    else:
        _FALLBACK.handle(record)
