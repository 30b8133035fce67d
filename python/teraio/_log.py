"""The C library's log messages on Python's logging: logger "teraio", from `import teraio` on.

libteraio logs from any thread, the engine's threads included. Its messages are queued in C
and handed to the "teraio" logger on the main thread (at its next bytecode, or when the
Offloader flushes at the end of each step and at close()); logging them never waits for the
GIL in a library thread, so a training thread that holds the GIL while it waits for the engine
cannot deadlock with it. Levels: error -> ERROR, warn -> WARNING, info -> INFO, debug -> DEBUG,
trace -> 5. Which C messages are formatted at all is the library's threshold: TIO_LOG_LEVEL
(default warn) or teraio._core.log_level(). Without a handler configured, Python prints
WARNING and above to stderr, as the library did itself before.
"""
from __future__ import annotations

import atexit
import logging

from teraio import _core

LEVELS = (logging.ERROR, logging.WARNING, logging.INFO, logging.DEBUG, 5)

logger = logging.getLogger("teraio")


def _emit(level, func, msg):
    py_level = LEVELS[level] if 0 <= level < len(LEVELS) else logging.ERROR
    logger.log(py_level, "teraio: %s", msg, extra={"tio_func": func})


def install():
    _core.log_to_python(_emit)
    # before the interpreter goes: what is queued is logged, later messages go to stderr
    atexit.register(_core.log_to_python, None)


def flush():
    _core.log_flush()
