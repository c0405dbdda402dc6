"""The one owner of a key's production: a missing entry made once across threads,
processes and replicas, stored, and only then let go.

:meth:`Production.make` runs, in order, for a key its caller has looked up and not found:

1. **the local flight** (:class:`~lib.cache.singleflight.LocalFlights`): one thread of
   this process goes on; the others wait for it and get its entry;
2. **the lease** across processes (``leases``: the lock store beside the disk tier,
   Redis, or lease objects in an object store), renewed while it is held; or, when
   another process holds it, waiting for the entry that process stores;
3. **the re-check**: with the lease taken, one more lookup, because the previous holder
   may have stored the entry and released its lease between our last look and our lease;
4. **produce**: the caller's function, with :func:`current_lease` naming the lease it runs
   under, so that the engine watchdog stops renewing it past an engine call's deadline
   (:mod:`lib.compose.produce` binds the two; :meth:`~lib.cache.leases.Renewer.bound`);
5. **the write**: :meth:`Tiers.keep <lib.cache.tiers.Tiers.keep>` puts the entry in memory
   at once and hands disk, Redis and the object store to the writer thread (``durable``:
   disk before returning);
6. **the release** of the lease, once that write reached every tier: no other process
   can find the key neither stored nor leased, so none runs the engine for it again.

A failure at any step releases the lease and stores nothing. A broken lock store, or a
holder that keeps its lease past ``cache.lock_timeout``, degrades to this process alone
(the engine runs here, without a lease), never to a failed request.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextvars import ContextVar

from lib.cache.entry import CachedAudio
from lib.cache.leases import NO_LEASE, Lease, Leases, Renewer
from lib.cache.singleflight import LocalFlights
from lib.cache.tiers import Tiers
from lib.config import CacheConfig

__all__ = ["Production", "current_lease"]

_LOGGER = logging.getLogger(__name__)

_UNDER: ContextVar[Lease] = ContextVar("production_lease", default=NO_LEASE)


def current_lease() -> Lease:
    """The lease the calling thread's production runs under (:data:`NO_LEASE`: none).

    A production that stores nothing takes no lease and leaves this as it was: a
    sentence made inside a result's production (a text of one segment) runs under the
    result's lease, and its engine call bounds that lease."""
    return _UNDER.get()


class Production:
    """Makes missing entries once and stores them (see the module's steps).

    ``leases`` None: single-flight within this process only (no lock store)."""

    def __init__(
        self, tiers: Tiers, leases: Leases | None, renewer: Renewer | None, config: CacheConfig,
        on_lock_error: Callable[[BaseException], None],
    ) -> None:  # fmt: skip
        self.tiers = tiers
        self.leases = leases
        self.renewer = renewer
        self.lease = config.lock_lease
        self.timeout = config.lock_timeout
        self._on_lock_error = on_lock_error
        self.flights: LocalFlights[tuple[CachedAudio, bool]] = LocalFlights(timeout=config.lock_timeout)
        """This process's flights, by key."""

    def make(
        self, key: str, produce: Callable[[], CachedAudio], *, store: bool = True, origin: str = "user",
        durable: bool = False,
    ) -> tuple[CachedAudio, bool]:  # fmt: skip
        """``(entry, True)`` when this call produced it, ``(entry, False)`` when another
        thread or process did (or had just stored it). ``produce`` raises to fail: then
        nothing is stored and the lease is released.

        ``store`` False: the entry is not kept, so the flight is this process's alone: a
        lease would only make other processes wait for nothing, and would leave the key
        in the lock store or Redis. ``origin`` ``preload`` tells the disk tier's eviction
        policy the entry was not requested; ``durable``: on disk before this returns."""

        def lead() -> tuple[CachedAudio, bool]:
            return self._lead(key, produce, store=store, origin=origin, durable=durable)

        (entry, produced), led = self.flights.run(key, lead)
        return entry, produced and led

    def _lead(
        self, key: str, produce: Callable[[], CachedAudio], *, store: bool, origin: str, durable: bool
    ) -> tuple[CachedAudio, bool]:
        if not store:
            return produce(), True
        taken = self._take(key)
        if isinstance(taken, CachedAudio):
            return taken, False
        lease = taken
        try:
            if lease is not NO_LEASE:
                found = self.tiers.find(key)
                if found is not None:
                    lease.release()
                    return found, False
            bound = _UNDER.set(lease)
            try:
                entry = produce()
            finally:
                _UNDER.reset(bound)
            stored = self.tiers.keep(entry, origin=origin, durable=durable)
            stored.add_done_callback(lambda _: lease.release())  # in the writer thread, once written everywhere
            return entry, True
        except BaseException:
            lease.release()
            raise

    def _take(self, key: str) -> Lease | CachedAudio:
        """The key's lease; or the entry its holder stored while this one waited; or
        :data:`NO_LEASE` (produce here, unshared) when there is no lock store, it fails,
        or the holder keeps it past ``cache.lock_timeout``. A holder that dies loses its
        lease when it expires, and a waiter takes it over."""
        leases = self.leases
        if leases is None:
            return NO_LEASE
        deadline = time.monotonic() + self.timeout
        delay = 0.002
        while True:
            try:
                token = leases.acquire(key, self.lease)
            except Exception as exc:  # lock store broken: degrade to in-process only
                self._on_lock_error(exc)
                return NO_LEASE
            if token is not None:
                return Lease(key, token, leases, self.renewer, self._on_lock_error)
            # Someone else is producing: poll for the result with gentle backoff.
            while True:
                found = self.tiers.find(key)
                if found is not None:
                    return found
                try:
                    still_held = leases.held(key)
                except Exception as exc:
                    self._on_lock_error(exc)
                    return NO_LEASE
                if not still_held:
                    break  # holder finished without storing, or died: try to take over
                if time.monotonic() > deadline:
                    _LOGGER.warning(
                        "waited %.0f s for another process to synthesise %s; running it here", self.timeout, key
                    )
                    return NO_LEASE
                time.sleep(delay)
                delay = min(delay * 1.5, 0.05)
