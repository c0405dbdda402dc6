"""Single-flight inside one process: the first thread to miss a key becomes its leader
and the others wait on an event for the leader's outcome.

Who waits is joined too: the flight's work runs for its :class:`~lib.core.waiting.Waiters`,
the leader's and every follower's callers, so that a key one caller has left is still made
while another waits for it (:mod:`lib.core.waiting`); a follower still waiting when the
leader gave up for lack of waiters runs it again itself.

This is the first step of :class:`lib.cache.production.Production`, which adds the
lease across processes (:mod:`lib.cache.leases`) and the rest of a key's production.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from lib.core.waiting import Waiters, waited_by, waiting
from lib.errors import AbandonedError

__all__ = ["LocalFlights"]

_LOGGER = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class _Flight(Generic[T]):
    waiters: Waiters
    done: threading.Event = field(default_factory=threading.Event)
    value: T | None = None
    error: BaseException | None = None


class LocalFlights(Generic[T]):
    """In-process single-flight: ``run(key, fn)`` calls ``fn`` once per key at a time;
    concurrent callers get the leader's value (or its exception). Returns
    ``(value, led)`` where ``led`` says whether this caller ran ``fn``.

    A follower waits at most ``timeout`` seconds; then it runs ``fn`` itself, so a
    leader stuck in a hung engine call cannot hold every later request forever.
    """

    def __init__(self, timeout: float | None = None) -> None:
        self._flights: dict[str, _Flight[T]] = {}
        self._lock = threading.Lock()
        self.timeout = timeout

    def run(self, key: str, fn: Callable[[], T]) -> tuple[T, bool]:
        while True:
            with self._lock:
                flight = self._flights.get(key)
                leader = flight is None
                if flight is None:
                    flight = self._flights[key] = _Flight(Waiters(waiting()))
                else:
                    flight.waiters.join(waiting())  # the leader's work goes on while this caller waits
            if leader:
                return self._lead(key, flight, fn)
            if not flight.done.wait(self.timeout):
                _LOGGER.warning("waited %.0f s for this process's synthesis of %s; running it again", self.timeout, key)
                return fn(), True
            if isinstance(flight.error, AbandonedError) and waiting().alive():
                continue  # dropped as nobody's just as this caller joined: this one waits, so lead it
            if flight.error is not None:
                raise flight.error
            return flight.value, False  # type: ignore[return-value]

    def _lead(self, key: str, flight: _Flight[T], fn: Callable[[], T]) -> tuple[T, bool]:
        try:
            with waited_by(flight.waiters):
                flight.value = fn()
            return flight.value, True
        except BaseException as exc:
            flight.error = exc
            raise
        finally:
            with self._lock:
                del self._flights[key]
            flight.done.set()

    def waiters(self, key: str) -> int:
        """How many callers wait for ``key``'s flight now (0: none in flight)."""
        with self._lock:
            flight = self._flights.get(key)
        return 0 if flight is None else len(flight.waiters)

    def __len__(self) -> int:
        return len(self._flights)
