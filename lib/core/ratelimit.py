"""Log lines rate-limited per cause, so that a fault repeated on every request (a full
Redis refusing each write, an entry too large to store, a broken store) is reported
once and then summarised, instead of flooding the log.

The first line of a cause is logged at once; later lines of the same cause within
``every`` seconds are counted, not logged, and the next line logged for that cause
says how many were held back. A cause is any short string that names the fault
(``"redis-oom"``, ``"too-large"``, ``"cache:put:OperationalError"``); user text never
goes into a cause.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict

__all__ = ["LogLimiter"]


class LogLimiter:
    """At most one log line per cause every ``every`` seconds. Thread-safe; remembers
    at most ``causes`` causes (the least recently logged are forgotten first)."""

    def __init__(self, logger: logging.Logger, every: float = 60.0, causes: int = 256) -> None:
        self.logger = logger
        self.every = every
        self._max = causes
        self._lock = threading.Lock()
        self._next: OrderedDict[str, tuple[float, int]] = OrderedDict()
        """cause -> (monotonic time the next line may be logged, lines held back)"""

    def log(self, level: int, cause: str, message: str, *args: object) -> bool:
        """Log ``message % args`` unless ``cause`` was logged less than ``every``
        seconds ago. True if the line was logged."""
        now = time.monotonic()
        with self._lock:
            due, held = self._next.get(cause, (0.0, 0))
            if now < due:
                self._next[cause] = (due, held + 1)
                return False
            self._next[cause] = (now + self.every, 0)
            self._next.move_to_end(cause)
            while len(self._next) > self._max:
                self._next.popitem(last=False)
        if held:
            message += " (%d more like this in the last %.0f s)"
            args = (*args, held, self.every)
        self.logger.log(level, message, *args)
        return True

    def held_back(self, cause: str) -> int:
        """Lines of ``cause`` counted but not logged since its last logged line."""
        with self._lock:
            return self._next.get(cause, (0.0, 0))[1]

    def forget(self, cause: str) -> None:
        """Log the next line of ``cause`` at once (e.g. after the fault cleared)."""
        with self._lock:
            self._next.pop(cause, None)
