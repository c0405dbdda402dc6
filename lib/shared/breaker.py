"""A circuit breaker around the Redis client: a fault never fails a request.

While Redis answers, every call goes through. The first connection fault or time-out
*opens* the breaker: the fault is counted and logged once, and for a back-off interval
(0.25 s, doubling up to 5 s) calls are skipped and answer their default at once, so a
dead or slow Redis costs at most one socket time-out, not one per request. When the
interval is over, one caller (a request or the stats publisher) probes; success closes
the breaker and logs the recovery, failure doubles the interval.

A command error (``ResponseError``: out of memory under ``noeviction``, a wrong type
from a foreign key) is counted and logged, rate-limited per cause (at most once a
minute, with the count of those held back), but does not open the breaker: the
connection is healthy and other commands still work.

Every error class is contained: besides Redis's own, a client whose socket was closed
under it can raise ``ValueError`` ("I/O operation on closed file") or others; they open
the breaker like a connection fault, and never reach a request. And opening the breaker
never closes a socket another thread is using: only idle pooled connections are dropped
(a connection in use fails or finishes on its own, and redis-py reconnects it).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import redis

from lib.ratelimit import LogLimiter

__all__ = ["Breaker"]

_LOGGER = logging.getLogger(__name__)
_LIMITED = LogLimiter(_LOGGER, every=60.0)

T = TypeVar("T")

#: Faults that mean "Redis is not reachable in time": they open the breaker.
_TRIPPING = (redis.ConnectionError, redis.TimeoutError, OSError)


class Breaker:
    """Guards calls to one Redis server. Thread-safe."""

    def __init__(
        self,
        where: str,
        on_error: Callable[[], None],
        *,
        on_trip: Callable[[], None] = lambda: None,
        first_backoff: float = 0.25,
        max_backoff: float = 5.0,
    ) -> None:
        self._where = where
        self._on_error = on_error
        self._on_trip = on_trip
        self._first = first_backoff
        self._max = max_backoff
        self._lock = threading.Lock()
        self._up = True
        self._backoff = 0.0
        self._retry_at = 0.0
        self._last_message: str | None = None
        self.errors = 0
        """Faults counted by this breaker (also reported through ``on_error``)."""
        self.last_error: str | None = None
        self.down_since: float | None = None
        """Unix time the breaker opened, None while Redis is up."""

    @property
    def up(self) -> bool:
        return self._up

    def allow(self) -> bool:
        """Whether a call may go to Redis now. While open, the first caller after the
        back-off interval is let through as the probe; the others keep skipping."""
        with self._lock:
            if self._up:
                return True
            now = time.monotonic()
            if now < self._retry_at:
                return False
            self._retry_at = now + self._backoff  # claim the probe
            return True

    def call(self, op: str, fn: Callable[[], T], default: T) -> T:
        """``fn()``, or ``default`` if the breaker is open or ``fn`` fails."""
        if not self.allow():
            return default
        try:
            result = fn()
        except _TRIPPING as exc:
            self.fault(op, exc, trip=True)
            return default
        except redis.RedisError as exc:
            self.fault(op, exc, trip=False)
            return default
        except Exception as exc:  # a client in an unknown state: contain it, like a lost connection
            self.fault(op, exc, trip=True)
            return default
        self.success()
        return result

    def success(self) -> None:
        if self._up:
            return
        with self._lock:
            if self._up:
                return
            self._up = True
            self._backoff = 0.0
            self.down_since = None
            self._last_message = None
        _LOGGER.warning("shared tier %s is reachable again; using it", self._where)

    def count(self, exc: BaseException, message: str | None = None) -> None:
        """Count a fault that the caller has logged (e.g. a corrupt value)."""
        with self._lock:
            self.errors += 1
            self.last_error = message or f"{type(exc).__name__}: {exc}"
        self._on_error()

    def fault(self, op: str, exc: BaseException, *, trip: bool) -> None:
        """Count a fault; open the breaker if ``trip``. Logs once per state change."""
        message = f"{op}: {type(exc).__name__}: {exc}"
        self.count(exc, message)
        if not trip:
            # One cause (say, out of memory) is refused for every put, profile and
            # statistics write alike: limit by the error, not by the operation.
            _LIMITED.log(
                logging.WARNING, f"{self._where}:{type(exc).__name__}:{exc}",
                "shared tier %s refused a command (%s); continuing without it", self._where, message,
            )  # fmt: skip
            return
        with self._lock:
            was_up = self._up
            self._up = False
            self._backoff = min(max(self._backoff * 2, self._first), self._max)
            self._retry_at = time.monotonic() + self._backoff
            if was_up:
                self.down_since = time.time()
                self._last_message = message
        if was_up:
            _LOGGER.error(
                "shared tier %s is unreachable (%s); serving from local tiers and local single-flight, "
                "retrying with backoff up to %.0f s",
                self._where, message, self._max,
            )  # fmt: skip
        # Drop idle pooled connections: after a restart every one of them is stale, and
        # each would otherwise fail once more and push the back-off further out.
        try:
            self._on_trip()
        except Exception:  # pragma: no cover - disconnecting must never raise into a request
            _LOGGER.debug("could not drop shared-tier connections", exc_info=True)
