"""Single-flight: concurrent identical misses run the engine once.

Two layers. Inside one process, the first thread to miss a key becomes its leader and
the others wait on an event for the leader's outcome. Across processes (and, with the
shared tier, across replicas), leaders take a *lease* on the key: a lock with an expiry
that the holder renews while the engine runs, so a crashed holder blocks the key at
most for one lease. A process that finds the lease taken polls for the result instead
of running the engine.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from lib.cache.leases import NO_LEASE, Lease, Leases, Renewer

__all__ = ["LocalFlights", "lead_or_wait"]

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


def lead_or_wait(
    key: str,
    leases: Leases | None,
    renewer: Renewer | None,
    *,
    lease: float,
    timeout: float,
    lookup: Callable[[], T | None],
    produce: Callable[[Lease], T],
    on_lock_error: Callable[[BaseException], None],
) -> tuple[T, bool]:
    """Across processes: take the lease and ``produce``, or wait for whoever holds it
    and return what ``lookup`` then finds. Returns ``(value, produced)``.

    ``produce(lease)`` owns the lease from then on and must release it once its result
    is visible to other processes (it may do so later, from another thread, e.g. after
    a background write); if it raises, the lease is released here. ``lookup`` is tried
    once more right after taking the lease, because the previous holder may have just
    stored the result. If the holder dies, its lease expires and a waiter takes over;
    if waiting exceeds ``timeout``, the waiter produces anyway.
    """
    deadline = time.monotonic() + timeout
    delay = 0.002
    while True:
        if leases is None:
            return produce(NO_LEASE), True
        try:
            token = leases.acquire(key, lease)
        except Exception as exc:  # lock store broken: degrade to in-process only
            on_lock_error(exc)
            return produce(NO_LEASE), True
        if token is not None:
            held = Lease(key, token, leases, renewer, on_lock_error)
            try:
                found = lookup()
                if found is not None:
                    held.release()
                    return found, False
                return produce(held), True
            except BaseException:
                held.release()
                raise
        # Someone else is producing: poll for the result with gentle backoff.
        while True:
            found = lookup()
            if found is not None:
                return found, False
            try:
                still_held = leases.held(key)
            except Exception as exc:
                on_lock_error(exc)
                return produce(NO_LEASE), True
            if not still_held:
                break  # holder finished without storing, or died: try to take over
            if time.monotonic() > deadline:
                _LOGGER.warning("waited %.0f s for another process to synthesise %s; running it here", timeout, key)
                return produce(NO_LEASE), True
            time.sleep(delay)
            delay = min(delay * 1.5, 0.05)
