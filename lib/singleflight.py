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
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

import diskcache

from lib.diskutil import open_cache

__all__ = ["DiskLeases", "Leases", "LocalFlights", "Renewer", "lead_or_wait"]

_LOGGER = logging.getLogger(__name__)

T = TypeVar("T")


class Leases(Protocol):
    """Expiring per-key locks shared between processes."""

    def acquire(self, key: str, lease: float) -> str | None:
        """A token if the lock was free (now taken), else None."""
        ...

    def renew(self, key: str, token: str, lease: float) -> bool:
        """Extend our lock; False if it is no longer ours."""
        ...

    def release(self, key: str, token: str) -> None:
        """Release our lock (never someone else's)."""
        ...

    def held(self, key: str) -> bool:
        """Whether anyone holds the lock now."""
        ...


class DiskLeases:
    """Leases in a diskcache beside the store (``<cache.dir>/locks``): atomic across
    processes on one host through SQLite transactions."""

    def __init__(self, directory: str) -> None:
        self._cache: diskcache.Cache = open_cache(directory, eviction_policy="none", size_limit=2**40)

    def acquire(self, key: str, lease: float) -> str | None:
        token = secrets.token_hex(8)
        # add() is atomic and treats an expired lock as absent.
        return token if self._cache.add(key, token, expire=lease) else None

    def renew(self, key: str, token: str, lease: float) -> bool:
        with self._cache.transact():
            if self._cache.get(key) != token:
                return False
            self._cache.set(key, token, expire=lease)
            return True

    def release(self, key: str, token: str) -> None:
        with self._cache.transact():
            if self._cache.get(key) == token:
                self._cache.delete(key)

    def held(self, key: str) -> bool:
        return self._cache.get(key) is not None

    def close(self) -> None:
        self._cache.close()


@dataclass
class _Flight(Generic[T]):
    done: threading.Event = field(default_factory=threading.Event)
    value: T | None = None
    error: BaseException | None = None


class LocalFlights(Generic[T]):
    """In-process single-flight: ``run(key, fn)`` calls ``fn`` once per key at a time;
    concurrent callers get the leader's value (or its exception). Returns
    ``(value, led)`` where ``led`` says whether this caller ran ``fn``."""

    def __init__(self) -> None:
        self._flights: dict[str, _Flight[T]] = {}
        self._lock = threading.Lock()

    def run(self, key: str, fn: Callable[[], T]) -> tuple[T, bool]:
        with self._lock:
            flight = self._flights.get(key)
            leader = flight is None
            if flight is None:
                flight = self._flights[key] = _Flight()
        if not leader:
            flight.done.wait()
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


class Renewer:
    """One daemon thread that renews every lease this process holds, every third of
    the lease time, so a long synthesis keeps its lock and a dead process loses it."""

    def __init__(self, leases: Leases, lease: float) -> None:
        self._leases = leases
        self._lease = lease
        self._held: dict[str, str] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._stopped = False

    def add(self, key: str, token: str) -> None:
        with self._lock:
            self._held[key] = token
            if self._thread is None and not self._stopped:
                self._thread = threading.Thread(target=self._loop, name="lease-renewer", daemon=True)
                self._thread.start()

    def remove(self, key: str) -> None:
        with self._lock:
            self._held.pop(key, None)

    def stop(self) -> None:
        self._stopped = True
        self._wake.set()

    def _loop(self) -> None:
        while not self._wake.wait(self._lease / 3):
            with self._lock:
                held = list(self._held.items())
            for key, token in held:
                try:
                    if not self._leases.renew(key, token, self._lease):
                        _LOGGER.warning("lost the single-flight lease on %s (expired while running)", key)
                except Exception:  # a broken lock store must not kill the thread
                    _LOGGER.exception("could not renew the single-flight lease on %s", key)


def _noop() -> None:
    return None


def lead_or_wait(
    key: str,
    leases: Leases | None,
    renewer: Renewer | None,
    *,
    lease: float,
    timeout: float,
    lookup: Callable[[], T | None],
    produce: Callable[[Callable[[], None]], T],
    on_lock_error: Callable[[BaseException], None],
) -> tuple[T, bool]:
    """Across processes: take the lease and ``produce``, or wait for whoever holds it
    and return what ``lookup`` then finds. Returns ``(value, produced)``.

    ``produce(release)`` must call ``release()`` once its result is visible to other
    processes (it may do so later, from another thread, e.g. after a background write);
    if it raises, the lease is released here. ``lookup`` is tried once more right after
    taking the lease, because the previous holder may have just stored the result. If
    the holder dies, its lease expires and a waiter takes over; if waiting exceeds
    ``timeout``, the waiter produces anyway.
    """
    deadline = time.monotonic() + timeout
    delay = 0.002
    while True:
        if leases is None:
            return produce(_noop), True
        try:
            token = leases.acquire(key, lease)
        except Exception as exc:  # lock store broken: degrade to in-process only
            on_lock_error(exc)
            return produce(_noop), True
        if token is not None:
            release = _releaser(key, token, leases, renewer, on_lock_error)
            try:
                found = lookup()
                if found is not None:
                    release()
                    return found, False
                return produce(release), True
            except BaseException:
                release()
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
                return produce(_noop), True
            if not still_held:
                break  # holder finished without storing, or died: try to take over
            if time.monotonic() > deadline:
                _LOGGER.warning("waited %.0f s for another process to synthesise %s; running it here", timeout, key)
                return produce(_noop), True
            time.sleep(delay)
            delay = min(delay * 1.5, 0.05)


def _releaser(
    key: str, token: str, leases: Leases, renewer: Renewer | None, on_error: Callable[[BaseException], None]
) -> Callable[[], None]:
    """A release function that is safe to call more than once, from any thread."""
    state = {"done": False}
    guard = threading.Lock()
    if renewer is not None:
        renewer.add(key, token)

    def release() -> None:
        with guard:
            if state["done"]:
                return
            state["done"] = True
        if renewer is not None:
            renewer.remove(key)
        try:
            leases.release(key, token)
        except Exception as exc:
            on_error(exc)

    return release
