"""Leases: expiring per-key locks shared between processes (and, with the shared tier,
between replicas), and the thread that renews the ones this process holds.

A holder renews its lease every third of the lease time while the engine runs, so a
live holder keeps its key and a dead one loses it after at most one lease.
"""

from __future__ import annotations

import logging
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import diskcache

from lib.cache.handle import STORE_ERRORS, DiskHandle
from lib.core.ratelimit import LogLimiter

__all__ = ["BUSY_PATIENCE", "NO_LEASE", "DiskLeases", "Lease", "Leases", "LockStoreBusy", "Renewer"]

_LOGGER = logging.getLogger(__name__)
_BUSY_LOG = LogLimiter(_LOGGER, every=60.0)

_T = TypeVar("_T")


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


class LockStoreBusy(RuntimeError):
    """The lock database stayed busy (other writers) longer than an operation waits."""


#: Seconds a lease operation waits, in all, for a busy lock database before it gives up.
#: Busy is contention, not failure: dozens of concurrent misses in several processes
#: queue on SQLite's one write lock, and a writer that holds it while waiting for the GIL
#: can keep it past the 1 s busy time-out (measured: 64 streamed misses on 2 processes).
BUSY_PATIENCE = 10.0


def _busy(exc: BaseException) -> bool:
    return isinstance(exc, diskcache.Timeout) or (
        isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc).lower()
    )


class DiskLeases:
    """Leases in a diskcache beside the store (``<cache.dir>/locks``): atomic across
    processes on one host through SQLite transactions. A busy lock database is waited
    for (up to :data:`BUSY_PATIENCE` seconds, a warning in the log): contention does not
    switch single-flight off. A failing one raises (single-flight then falls back to
    this process alone) and is reopened later."""

    def __init__(
        self, directory: str, on_error: Callable[[str, BaseException], None] = lambda op, e: None, **settings: Any
    ) -> None:
        # A short busy time-out: a lease is renewed every third of its (short) life, and
        # a renewal stuck behind a busy database for long would let the lease lapse.
        settings.setdefault("timeout", 1.0)
        self._disk = DiskHandle(
            Path(directory), name="lock", on_error=on_error, eviction_policy="none", size_limit=2**30, **settings
        )
        self._disk.open()

    @property
    def handle(self) -> DiskHandle:
        return self._disk

    def _cache(self, op: str) -> diskcache.Cache:
        cache = self._disk.open(write=True)
        if cache is None:
            raise OSError(f"the lock store is unavailable ({self._disk.last_error})")
        return cache

    def _call(self, op: str, fn: Callable[[diskcache.Cache], _T], patience: float = BUSY_PATIENCE) -> _T:
        give_up = time.monotonic() + patience
        delay = 0.01
        while True:
            cache = self._cache(op)
            try:
                return fn(cache)
            except STORE_ERRORS as exc:
                if not _busy(exc):
                    self._disk.failed(op, exc, cache)
                    raise
                if time.monotonic() + delay >= give_up:
                    _BUSY_LOG.log(logging.WARNING, f"gave-up:{op}",
                                  "the lock store stayed busy for %.0f s (%s); %s", patience, op,
                                  "this key's synthesis is not shared with other processes")  # fmt: skip
                    raise LockStoreBusy(f"the lock store stayed busy for {patience:.0f} s ({op})") from exc
                _BUSY_LOG.log(logging.WARNING, f"busy:{op}", "the lock store is busy (%s); waiting for it", op)
                time.sleep(delay)
                delay = min(delay * 2, 0.2)

    def acquire(self, key: str, lease: float) -> str | None:
        token = secrets.token_hex(8)
        # add() is atomic and treats an expired lock as absent.
        return token if self._call("lock", lambda c: c.add(key, token, expire=lease)) else None

    def renew(self, key: str, token: str, lease: float) -> bool:
        def renew(cache: diskcache.Cache) -> bool:
            with cache.transact():
                if cache.get(key) != token:
                    return False
                cache.set(key, token, expire=lease)
                return True

        # A renewal waits at most a third of the lease: the next one is due by then.
        return self._call("renew", renew, patience=lease / 3)

    def release(self, key: str, token: str) -> None:
        def release(cache: diskcache.Cache) -> None:
            with cache.transact():
                if cache.get(key) == token:
                    cache.delete(key)

        self._call("unlock", release)

    def held(self, key: str) -> bool:
        return self._call("held", lambda c: c.get(key) is not None)

    def expires_at(self, key: str) -> float | None:
        """Unix time the lease on ``key`` runs out unless renewed; None if not held
        (for tests and diagnostics)."""
        found = self._call("held", lambda c: c.get(key, expire_time=True))
        value, expire = found if isinstance(found, tuple) else (None, None)
        return float(expire) if value is not None and expire is not None else None

    def sweep(self) -> int:
        """Remove the expired leases of holders that died (they are ignored anyway). A
        busy lock store is left alone: the next sweep does it."""
        cache = self._disk.open(write=True)
        if cache is None:
            return 0
        try:
            return int(cache.expire())
        except STORE_ERRORS as exc:
            if not _busy(exc):
                self._disk.failed("sweep", exc, cache)
            return 0

    def close(self) -> None:
        self._disk.close()


class Renewer:
    """One daemon thread that renews every lease this process holds, every third of
    the lease time, so a long synthesis keeps its lock and a dead process loses it.

    A lease may be bounded (:meth:`bound`, set by the engine watchdog while an engine
    call runs under it): past that monotonic time it is no longer renewed, so a holder
    stuck in an engine call past the call's deadline loses the key within one lease
    even while its process lives."""

    def __init__(self, leases: Leases, lease: float) -> None:
        self._leases = leases
        self._lease = lease
        self._held: dict[str, str] = {}
        self._bounds: dict[str, float] = {}
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
            self._bounds.pop(key, None)

    def bound(self, key: str, token: str, until: float | None) -> None:
        """Renew the lease on ``key`` only until the monotonic time ``until`` (None:
        again without a bound)."""
        with self._lock:
            if self._held.get(key) != token:
                return
            if until is None:
                self._bounds.pop(key, None)
            else:
                self._bounds[key] = until

    def stop(self) -> None:
        """Stop renewing and join the thread (leases still held then simply expire)."""
        with self._lock:
            self._stopped = True
            thread = self._thread
        self._wake.set()
        if thread is not None:
            thread.join(timeout=10)

    def _holds(self, key: str, token: str) -> bool:
        with self._lock:
            return self._held.get(key) == token

    def _loop(self) -> None:
        overdue: set[str] = set()
        while not self._wake.wait(self._lease / 3):
            now = time.monotonic()
            with self._lock:
                held = [(k, t) for k, t in self._held.items() if self._bounds.get(k, now) >= now]
                late = {k for k in self._held if self._bounds.get(k, now) < now}
            for key in late - overdue:
                _LOGGER.warning("not renewing the single-flight lease on %s: its engine call passed its deadline", key)
            overdue = late
            for key, token in held:
                try:
                    if not self._leases.renew(key, token, self._lease) and self._holds(key, token):
                        # (Not a lease released since the snapshot above: that is no loss.)
                        _LOGGER.warning("lost the single-flight lease on %s (expired while running)", key)
                except LockStoreBusy:
                    pass  # contention, logged as a warning where it was met; the next round tries again
                except Exception:  # a broken lock store must not kill the thread
                    _LOGGER.exception("could not renew the single-flight lease on %s", key)


class Lease:
    """A lease this process holds on one key, renewed until :meth:`release`.

    Taken and released by :class:`lib.cache.production.Production`: released once the
    key's entry is visible to other processes (on disk, in the shared tier and the object
    store; the writer thread's job ends with it), so no other process runs the engine for
    the key in between. :meth:`release` is idempotent and safe from any thread.
    """

    __slots__ = ("_done", "_guard", "_leases", "_on_error", "_renewer", "key", "token")

    def __init__(
        self,
        key: str,
        token: str,
        leases: Leases,
        renewer: Renewer | None,
        on_error: Callable[[BaseException], None],
    ) -> None:
        self.key = key
        self.token = token
        self._leases = leases
        self._renewer = renewer
        self._on_error = on_error
        self._guard = threading.Lock()
        self._done = False
        if renewer is not None:
            renewer.add(key, token)

    def renew_until(self, until: float | None) -> None:
        """Stop renewing at the monotonic time ``until`` (None: no bound); see
        :meth:`Renewer.bound`. The engine watchdog calls it around each engine call."""
        if self._renewer is not None:
            self._renewer.bound(self.key, self.token, until)

    def release(self) -> None:
        with self._guard:
            if self._done:
                return
            self._done = True
        if self._renewer is not None:
            self._renewer.remove(self.key)
        try:
            self._leases.release(self.key, self.token)
        except Exception as exc:
            self._on_error(exc)


class _NoLease:
    """Stands in for a lease where there is no lock store (bypass, or degraded)."""

    key = ""
    token = ""

    def renew_until(self, until: float | None) -> None:
        return None

    def release(self) -> None:
        return None


#: The lease of a producer that holds none.
NO_LEASE: Lease = _NoLease()  # type: ignore[assignment]
