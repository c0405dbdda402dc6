"""A circuit breaker around a remote store (Redis, an object store): a fault never
fails a request.

While the store answers, every call goes through. The first fault that means "not
reachable in time" *opens* the breaker: the fault is counted and logged once, and for a
back-off interval (0.25 s, doubling up to 5 s) calls are skipped and answer their
default at once, so a dead or slow store costs at most one time-out, not one per
request. When the interval is over, one caller (a request or a background probe)
probes; success closes the breaker and logs the recovery, failure doubles the interval.

A fault that leaves the store usable (a refused command: Redis out of memory under
``noeviction``, an object too large) is counted and logged, rate-limited per cause (at
most once a minute, with the count of those held back), but does not open the breaker.
Which faults trip is the caller's ``trips`` (:mod:`lib.shared.breaker` for Redis,
:mod:`lib.objects.faults` for an object store); an unknown exception trips, because a
client in an unknown state is best left alone for a while.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TypeVar

from lib.core.ratelimit import LogLimiter

__all__ = ["Breaker"]

_LOGGER = logging.getLogger(__name__)
_LIMITED = LogLimiter(_LOGGER, every=60.0)

T = TypeVar("T")


def _always(exc: BaseException) -> bool:
    return True


class Breaker:
    """Guards calls to one remote store. Thread-safe.

    ``what`` names the store in log lines ("shared tier", "object store"), ``fallback``
    says what requests do while it is open; ``trips(exc)`` tells a fault that opens the
    breaker from one that is only counted.
    """

    def __init__(
        self,
        where: str,
        on_error: Callable[[], None],
        *,
        on_trip: Callable[[], None] = lambda: None,
        first_backoff: float = 0.25,
        max_backoff: float = 5.0,
        what: str = "shared tier",
        fallback: str = "serving from local tiers and local single-flight",
        trips: Callable[[BaseException], bool] = _always,
    ) -> None:
        self._where = where
        self._on_error = on_error
        self._on_trip = on_trip
        self._first = first_backoff
        self._max = max_backoff
        self._what = what
        self._fallback = fallback
        self._trips = trips
        self._lock = threading.Lock()
        self._up = True
        self._backoff = 0.0
        self._retry_at = 0.0
        self._last_message: str | None = None
        self.errors = 0
        """Faults counted by this breaker (also reported through ``on_error``)."""
        self.last_error: str | None = None
        self.down_since: float | None = None
        """Unix time the breaker opened, None while the store is up."""

    @property
    def up(self) -> bool:
        return self._up

    def allow(self) -> bool:
        """Whether a call may go to the store now. While open, the first caller after
        the back-off interval is let through as the probe; the others keep skipping."""
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
        except Exception as exc:  # every class is contained: none may reach a request
            try:
                trip = self._trips(exc)
            except Exception:  # pragma: no cover - a classifier must not raise either
                trip = True
            self.fault(op, exc, trip=trip)
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
        _LOGGER.warning("%s %s is reachable again; using it", self._what, self._where)

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
            # One cause (say, out of memory) is refused for every put alike: limit by
            # the error, not by the operation.
            _LIMITED.log(
                logging.WARNING, f"{self._where}:{type(exc).__name__}:{exc}",
                "%s %s refused a command (%s); continuing without it", self._what, self._where, message,
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
                "%s %s is unreachable (%s); %s, retrying with backoff up to %.0f s",
                self._what, self._where, message, self._fallback, self._max,
            )  # fmt: skip
        # Drop idle pooled connections: after a restart every one of them is stale, and
        # each would otherwise fail once more and push the back-off further out.
        try:
            self._on_trip()
        except Exception:  # pragma: no cover - disconnecting must never raise into a request
            _LOGGER.debug("could not drop %s connections", self._what, exc_info=True)
