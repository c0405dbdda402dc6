"""Single-flight inside one process: the first thread to miss a key becomes its leader
and the others wait on an event for the leader's outcome.

This is the first step of :class:`lib.cache.production.Production`, which adds the
lease across processes (:mod:`lib.cache.leases`) and the rest of a key's production.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

__all__ = ["LocalFlights"]

_LOGGER = logging.getLogger(__name__)

T = TypeVar("T")


@dataclass
class _Flight(Generic[T]):
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
        with self._lock:
            flight = self._flights.get(key)
            leader = flight is None
            if flight is None:
                flight = self._flights[key] = _Flight()
        if not leader:
            if not flight.done.wait(self.timeout):
                _LOGGER.warning("waited %.0f s for this process's synthesis of %s; running it again", self.timeout, key)
                return fn(), True
            if flight.error is not None:
                raise flight.error
            return flight.value, False  # type: ignore[return-value]
        try:
            flight.value = fn()
            return flight.value, True
        except BaseException as exc:
            flight.error = exc
            raise
        finally:
            with self._lock:
                del self._flights[key]
            flight.done.set()

    def __len__(self) -> int:
        return len(self._flights)
