"""Cuvil's logging: standard `logging` under the "cuvil" logger, with a one-call level switch.

    >>> import cuvil
    >>> cuvil.set_log_level(cuvil.LogLevel.DEBUG)
"""
from __future__ import annotations

import enum
import logging
import os

logger = logging.getLogger("cuvil")


class LogLevel(enum.IntEnum):
    DEBUG = logging.DEBUG
    INFO = logging.INFO
    WARNING = logging.WARNING
    ERROR = logging.ERROR


def set_log_level(level) -> None:
    """Set the level of every `cuvil.*` logger; adds a stderr handler the first time so messages show."""
    level = LogLevel[level.upper()] if isinstance(level, str) else LogLevel(level)
    logger.setLevel(level)
    if not any(getattr(h, "_cuvil", False) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("[cuvil %(levelname)s %(name)s] %(message)s"))
        handler._cuvil = True
        logger.addHandler(handler)


if os.environ.get("CUVIL_LOG_LEVEL"):
    set_log_level(os.environ["CUVIL_LOG_LEVEL"])
