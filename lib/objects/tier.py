"""The object-store tier: every stored result, shared by all replicas, in an S3 bucket.

Implements :class:`lib.cache.tiers.SharedStore` like the Redis tier: ``get`` returns the
packed entry unverified (the caller unpacks it, checking key and CRC, and calls
:meth:`corrupt` on damage: the object is then deleted and the entry made again); ``put``
stores the same packed bytes the disk tier holds, with the entry's expiry as object
metadata, after its index objects (:mod:`lib.objects.layout`). An entry past its expiry
is never returned, and :meth:`sweep` deletes it (an hourly background sweep, taken by
one replica at a time with a lease, and the admin's *sweep expired*).

Every call goes through a :class:`lib.cache.breaker.Breaker`: a store that is unreachable,
slow (a 1 s time-out) or refusing turns into "not found here" plus one log line and a
counted fault; requests are served from the other tiers or the engine, ``/healthz``
says degraded, and a background probe closes the breaker when the store is back.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from typing_extensions import TypedDict

from lib.cache.breaker import Breaker
from lib.cache.entry import CachedAudio, CorruptEntryError, read_header
from lib.cache.leases import Leases
from lib.cache.signing import Signer
from lib.config import MAX_TTL
from lib.config.objects import parse_objects_url
from lib.objects.client import ObjectClient, trips
from lib.objects.feed import RETENTION, Apply, ObjectFeed
from lib.objects.layout import PLAYABLE, Card, Layout, hour_of
from lib.objects.leases import ObjectLeases
from lib.objects.playable import Playable
from lib.objects.sigv4 import Credentials

__all__ = ["ObjectCounts", "ObjectTier", "ObjectsStatus"]

_LOGGER = logging.getLogger(__name__)

_BATCH = 1000  # objects deleted per request
_SWEEP_LEASE = 300.0

_Outcome = Literal["hits", "misses", "expired", "puts", "corrupt", "rejected", "evicted", "swept"]


class ObjectCounts(TypedDict):
    """What this replica's calls to the object store came to, since start."""

    hits: int
    misses: int
    expired: int
    """Entries found past their expiry (never served)."""
    puts: int
    corrupt: int
    """Entries that failed verification (deleted, made again)."""
    rejected: int
    """Entries and playable copies refused for want of a valid tag under ``cache.secret``
    (made again, written over)."""
    evicted: int
    swept: int
    """Expired entries the sweep deleted."""


class ObjectsStatus(ObjectCounts):
    """:meth:`ObjectTier.status`: the tier on the dashboard (``objects``): no credential, no user text."""

    url: str
    up: bool
    errors: int
    """Faults counted by the breaker."""
    last_error: str | None
    down_since: float | None
    """Unix time the store became unreachable (None: it is up)."""
    redirect: bool
    """Whether ``/api/audio`` redirects to presigned URLs (``cache.objects_redirect``)."""
    leases: bool
    """Whether single-flight leases live in the store (no Redis)."""
    evictions_feed: bool
    """Whether evictions reach the other replicas through the store (no Redis)."""


def _expires(metadata: dict[str, str] | Any) -> float | None:
    try:
        value = metadata.get("expires")
        return None if value in (None, "") else float(value)
    except (TypeError, ValueError):
        return None


class ObjectTier:
    """Results in one bucket under one prefix (``cache.objects_url``).

    ``creds`` default to the ``AWS_*`` environment variables; ``on_error`` is called once
    per fault (the service passes the ``tts_objects_errors_total`` counter).
    """

    def __init__(
        self,
        url: str,
        *,
        creds: Credentials | None = None,
        on_error: Callable[[], None] = lambda: None,
        timeout: float = 1.0,
        probe_every: float = 1.0,
        sweep_every: float = 3600.0,
        redirect: bool = False,
        signer: Signer | None = None,
    ) -> None:
        self.location = parse_objects_url(url)
        self.signer = signer or Signer()
        """Tags what is written here and checks what is read (``cache.secret``; off without one)."""
        self.url = str(self.location)
        """The URL as shown in logs and on the dashboard (it holds no credential)."""
        self.client = ObjectClient(self.location, creds or Credentials.from_env(), timeout=timeout)
        self.layout = Layout(self.location)
        self.breaker = Breaker(
            self.url, on_error, what="object store", trips=trips,
            fallback="serving from the other tiers and the engine, with local single-flight",
        )  # fmt: skip
        self.redirect = redirect
        self.playable = Playable(self.client, self.layout, self.breaker, self.signer, lambda: self._count("rejected"))
        self.feed: ObjectFeed | None = None
        """Evictions for the other replicas, when this tier carries them (no Redis)."""
        self._lock = threading.Lock()
        self._counts: ObjectCounts = {
            "hits": 0, "misses": 0, "expired": 0, "puts": 0, "corrupt": 0, "rejected": 0, "evicted": 0, "swept": 0,
        }  # fmt: skip
        self._sweep_every = sweep_every
        self._probe_every = probe_every
        self._leases: ObjectLeases | None = None
        self._stop = threading.Event()
        self._closed = False
        self.breaker.call("connect", self.client.check_bucket, None)  # logs once if it cannot be used
        self._thread = threading.Thread(target=self._loop, name="object-tier", daemon=True)
        self._thread.start()

    # -- state ----------------------------------------------------------------------------

    @property
    def up(self) -> bool:
        """Whether the store answered the last call (gauge ``tts_objects_tier_up``)."""
        return self.breaker.up

    def leases(self, local: Leases | None) -> ObjectLeases:
        """Single-flight leases in the store (without Redis), falling back to ``local``
        while it is unreachable."""
        self._leases = ObjectLeases(self.client, self.layout, self.breaker, local)
        return self._leases

    def follow_evictions(self, apply: Apply, state_file: Path | None = None) -> None:
        """Carry evictions between replicas through the store (when there is no Redis):
        announce this replica's, apply the others' with ``apply``."""
        self.feed = ObjectFeed(self.client, self.layout, self.breaker, where=self.url)
        self.feed.follow(apply, state_file)

    def status(self) -> ObjectsStatus:
        """What the dashboard shows: no credential, no user text."""
        with self._lock:
            counts = self._counts.copy()
        return {
            "url": self.url,
            "up": self.up,
            "errors": self.breaker.errors,
            "last_error": self.breaker.last_error,
            "down_since": self.breaker.down_since,
            "redirect": self.redirect,
            "leases": self._leases is not None,
            "evictions_feed": self.feed is not None,
            **counts,
        }

    # -- audio entries (lib.cache.tiers.SharedStore) ---------------------------------------

    def get(self, key: str) -> bytes | None:
        """The packed entry for ``key`` (its tag checked, its content not), or None (also
        when expired, and when it has no valid tag under ``cache.secret``: a miss, made
        again and written over)."""
        got = self.breaker.call("get", lambda: self.client.get(self.layout.entry(key)), None)
        if got is None:
            self._count("misses")
            return None
        expires = _expires(got.metadata)
        if expires is not None and expires <= time.time():
            self._count("expired")  # never served; the sweep deletes it
            return None
        blob = self.signer.check("objects", "entry", key, got.body)
        if blob is None:
            self._count("rejected")
            self._count("misses")
            return None
        self._count("hits")
        return blob

    def put(self, key: str, blob: bytes, ttl: float | None = None) -> bool:
        """Store a packed entry with its index objects; ``ttl`` in seconds (None: kept
        until evicted). Called by the replica that made the entry, once."""
        if ttl is not None and not ttl > 0:  # also NaN
            return False
        try:
            head = read_header(blob)
        except CorruptEntryError:
            return False
        expires = head.get("expires")
        if not isinstance(expires, (int, float)):
            expires = None if ttl is None or ttl > MAX_TTL else time.time() + ttl
        card = Card.of(key, head, expires)
        metadata = {"expires": repr(float(expires))} if expires is not None else None
        signed = self.signer.sign("entry", key, blob)

        def write() -> bool:
            for name in self.layout.index(card):  # the index first: no entry is ever unlisted
                self.client.put(name, b"")
            return self.client.put(self.layout.entry(key), signed, metadata=metadata) is not None

        done = self.breaker.call("put", write, False)
        if done:
            self._count("puts")
        return done

    def corrupt(self, key: str, exc: BaseException) -> None:
        """``key``'s object failed verification: delete it (the caller makes the entry
        again) and count the fault."""
        _LOGGER.warning("object store entry %s is corrupt (%s); deleted, it will be regenerated", key, exc)
        self._count("corrupt")
        self.breaker.count(exc)
        self.delete(key)

    def delete(self, key: str) -> bool:
        names = [self.layout.entry(key), *self.layout.copies(key)]
        return bool(self.breaker.call("delete", lambda: self.client.delete_many(names), 0))

    def clear(self) -> int:
        """Delete every entry, copy and index object under the prefix (not the leases
        in use), and tell the other replicas; the number of entries removed."""
        removed = self.breaker.call("clear", self._clear, None)
        if removed is not None and self.feed is not None:
            self.feed.announce(None)
        return int(removed or 0)

    def evict(self, tag: str) -> int | None:
        """Delete every entry of ``tag`` (``engine:model_version`` or ``voice:<id>``),
        listing that tag's index only; the number removed, or None if the store could
        not be reached (its objects stay: evict again later)."""
        removed = self.breaker.call("evict", lambda: self._evict(tag), None)
        if removed is not None:
            self._count("evicted", removed)
            if self.feed is not None:
                self.feed.announce(tag)
        return removed

    def sweep(self, now: float | None = None) -> int | None:
        """Delete the entries whose expiry hour has passed (the expiry index is listed up
        to the current hour only), and eviction events older than a week."""
        removed = self.breaker.call("sweep", lambda: self._sweep(time.time() if now is None else now), None)
        if removed:
            self._count("swept", removed)
            _LOGGER.info("object store %s: %d expired entries swept", self.url, removed)
        return removed

    # -- playable copies (cache.objects_redirect) -----------------------------------------

    def redirects(self, fmt: str) -> bool:
        """Whether ``GET /api/audio`` in ``fmt`` may answer 302 here (``cache.objects_redirect``)."""
        return self.redirect and fmt in PLAYABLE

    def redirect_url(self, entry: CachedAudio, fmt: str, audio: Callable[[], bytes]) -> str | None:
        """A presigned URL of ``entry`` as a ``fmt`` file, or None to serve it directly."""
        return self.playable.url(entry, fmt, audio) if self.redirects(fmt) else None

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        if self.feed is not None:
            self.feed.close()
        self._thread.join(timeout=5)
        self.client.close()

    # -- internals --------------------------------------------------------------------------

    def _count(self, name: _Outcome, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    def _delete(self, names: list[str]) -> None:
        for start in range(0, len(names), _BATCH):
            self.client.delete_many(names[start : start + _BATCH])

    def _clear(self) -> int:
        entries = 0
        for part in ("a/", "p/", "t/", "x/"):
            doomed: list[str] = []
            for item in self.client.list(self.location.name(part)):
                doomed.append(item.name)
                entries += part == "a/"
                if len(doomed) >= _BATCH:
                    self._delete(doomed)
                    doomed = []
            self._delete(doomed)
        return entries

    def _evict(self, tag: str) -> int:
        removed, doomed = 0, []
        for item in self.client.list(self.layout.tag_dir(tag)):
            card = self.layout.card_of(item.name)
            names = self.layout.objects(card) if card is not None else [item.name]
            removed += card is not None
            doomed.extend(names)
            if len(doomed) >= _BATCH:
                self._delete(doomed)
                doomed = []
        self._delete(doomed)
        return removed

    def _sweep(self, now: float) -> int:
        current, removed, doomed = hour_of(now), 0, []
        for item in self.client.list(self.layout.expiry_dir()):
            if self.layout.hour_in(item.name) >= current:
                break  # names sort by hour: the rest expire later
            card = self.layout.card_of(item.name)
            if card is None:
                doomed.append(item.name)
                continue
            head = self.client.head(self.layout.entry(card.key))
            expires = _expires(head.metadata) if head is not None else None
            if head is not None and (expires is None or expires > now):
                doomed.append(item.name)  # made again since, with a later expiry: keep it
                continue
            removed += head is not None
            doomed.extend(self.layout.objects(card))
        cutoff = f"{self.layout.events_dir()}{int((now - RETENTION) * 1000):013d}"
        for item in self.client.list(self.layout.events_dir()):
            if item.name >= cutoff:
                break
            doomed.append(item.name)
        self._delete(doomed)
        return removed

    def _loop(self) -> None:
        # The probe that notices the store coming back when no requests arrive, and the
        # hourly sweep (one replica at a time: whoever takes the sweep lease).
        next_sweep = time.monotonic() + min(60.0, self._sweep_every)
        while not self._stop.wait(self._probe_every):
            if not self.breaker.up:
                self.breaker.call("probe", self.client.check_bucket, None)
            elif time.monotonic() >= next_sweep:
                next_sweep = time.monotonic() + self._sweep_every
                self._sweep_once()

    def _sweep_once(self) -> None:
        leases = self._leases or ObjectLeases(self.client, self.layout, self.breaker, None)
        token = leases.acquire("sweep", _SWEEP_LEASE)
        if token is None or token == "n:":
            return
        try:
            self.sweep()
        finally:
            leases.release("sweep", token)
