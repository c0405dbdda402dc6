"""The shared tier: one Redis behind many replicas.

Key layout, all under a namespace prefix (``tts:`` by default)::

    tts:a:<cache key>      packed audio entry (lib.cache.entry.pack bytes), PX = the entry's TTL
    tts:p:<profile key>    voice profile (sealed VoiceProfile.to_bytes)
    tts:v:<voice name>     saved voice (sealed JSON header + FLAC)
    tts:voices             set of saved voice names
    tts:voices:deleted     hash: voice name -> unix time it was deleted (tombstones)
    tts:lexicon            hash: JSON [term, voice] -> reading (the operator's lexicon)
    tts:lexicon:rev        the lexicon's revision, bumped by every edit (replicas poll it)
    tts:takes              hash: phrase id -> approved take record (lib.shared.takes)
    tts:takes:audio        hash: cache key -> the approved take's packed entry
    tts:takes:rev          the approvals' revision, bumped by every change (replicas poll it)
    tts:evictions          stream of evictions and clears, for every replica's local tiers
    tts:lock:<cache key>   single-flight lease (random token, PX = cache.lock_lease)
    tts:stats:<replica>    hash of one replica's counters, expires unless refreshed
    tts:replicas           sorted set of replica ids by last report (unix time)

Every call goes through a :class:`Breaker`, so Redis being down, slow or flushed only
ever turns into "not found here" (and a counted fault); the service then uses its
local tiers and local single-flight.

The voice keys are handled by :class:`lib.shared.voices.VoiceKeys`, the lexicon by
:class:`lib.shared.lexicon.LexiconKeys`, approved takes by :class:`lib.shared.takes.TakeKeys`,
evictions across replicas by :mod:`lib.shared.evictions`.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit, urlunsplit

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry
from typing_extensions import TypedDict

from lib.cache.leases import Leases
from lib.cache.signing import Signer
from lib.config import MAX_TTL
from lib.errors import ConfigError
from lib.shared.breaker import Breaker
from lib.shared.codec import as_bytes as _raw
from lib.shared.codec import as_text as _text
from lib.shared.evictions import Apply, EvictionFeed, evict_tag
from lib.shared.leases import RedisLeases, SharedLeases
from lib.shared.lexicon import LexiconKeys
from lib.shared.takes import TakeKeys
from lib.shared.tenants import TenantKeys
from lib.shared.voices import VoiceKeys

__all__ = ["ClusterState", "SharedCounts", "SharedStatus", "SharedTier"]

_LOGGER = logging.getLogger(__name__)

_SCAN_BATCH = 500
_STAT_FIELDS = ("hits", "misses", "bypasses", "errors", "engine_calls")

_Outcome = Literal["hits", "misses", "puts", "corrupt", "rejected"]
_OUTCOMES: tuple[_Outcome, ...] = ("hits", "misses", "puts", "corrupt", "rejected")


class SharedCounts(TypedDict):
    """This replica's calls to Redis for audio entries, since start."""

    hits: int
    misses: int
    puts: int
    corrupt: int
    """Entries that failed verification (deleted, made again)."""
    rejected: int
    """Entries refused for want of a valid tag under ``cache.secret`` (made again, written over)."""


class ClusterState(TypedDict):
    """Every live replica's published counters, their sum and Redis's memory (:meth:`SharedTier.status`)."""

    replicas: list[dict[str, str | float]]
    """One row per live replica: ``replica`` (its id) and whatever counters it published
    (``updated``, the unix time of its report; ``hits``...; ``shared_hits``...)."""
    cluster: dict[str, float]
    """The sum of every replica's ``hits``, ``misses``, ``bypasses``, ``errors``, ``engine_calls``,
    ``shared_hits`` and ``shared_errors``, and their ``hit_rate``."""
    redis_memory_bytes: int | None
    redis_maxmemory: int | None
    """0: no limit."""
    redis_maxmemory_policy: str | None


class _SeenCluster(TypedDict, total=False):
    """:class:`ClusterState`'s keys in :class:`SharedStatus`: the last ones read (none before Redis was read)."""

    replicas: list[dict[str, str | float]]
    cluster: dict[str, float]
    redis_memory_bytes: int | None
    redis_maxmemory: int | None
    redis_maxmemory_policy: str | None


_NO_CLUSTER: _SeenCluster = {}


class SharedStatus(SharedCounts, _SeenCluster):
    """:meth:`SharedTier.status`: the shared tier on the dashboard (``shared``) and in
    ``/api/cache/stats``: this replica's view, then the cluster as last read."""

    url: str
    """Without its password."""
    up: bool
    replica: str
    """This replica's id."""
    namespace: str
    errors: int
    """Faults counted by the breaker."""
    last_error: str | None
    down_since: float | None
    """Unix time Redis became unreachable (None: it is up)."""
    stale: bool
    """Whether the cluster figures are the last known (Redis is down)."""


def redact(url: str) -> str:
    """``url`` without its password, for logs and the dashboard."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"{parts.username or ''}:***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


class SharedTier(VoiceKeys, LexiconKeys, TakeKeys, TenantKeys):
    """Results, voices (:class:`VoiceKeys`), the lexicon (:class:`LexiconKeys`), leases and
    per-replica statistics in Redis.

    ``on_error`` is called once per fault (the service passes the
    ``tts_shared_errors_total`` counter); ``counters`` returns this replica's request
    counters (hits, misses, ...) for publishing every ``publish_every`` seconds.
    """

    def __init__(
        self,
        url: str,
        *,
        on_error: Callable[[], None] = lambda: None,
        counters: Callable[[], Mapping[str, int]] | None = None,
        namespace: str = "tts:",
        replica: str | None = None,
        timeout: float = 0.5,
        publish_every: float = 2.0,
        signer: Signer | None = None,
    ) -> None:
        self.url = redact(url)
        self.signer = signer or Signer()
        """Tags what is written here and checks what is read (``cache.secret``; off without one)."""
        self.namespace = namespace
        self.replica = replica or f"{socket.gethostname()}:{os.getpid()}"
        self._counters = counters
        self._publish_every = publish_every
        # Short time-outs and no client-side retries: the breaker decides when to retry.
        try:
            self.client: redis.Redis = redis.Redis.from_url(
                url,
                socket_timeout=timeout,
                socket_connect_timeout=timeout,
                retry=Retry(NoBackoff(), 0),
                health_check_interval=0,
            )
        except ValueError as exc:  # a malformed URL is a configuration error, not an outage
            raise ConfigError(f"cache.shared_url: {exc}; use redis://host:port/db") from exc
        self.breaker = Breaker(self.url, on_error, on_trip=self._drop_connections)
        self._remote_leases = RedisLeases(self.client, namespace + "lock:")
        self._local_leases: Leases | None = None
        self._lock = threading.Lock()
        self._counts: SharedCounts = {"hits": 0, "misses": 0, "puts": 0, "corrupt": 0, "rejected": 0}
        self._last_cluster: ClusterState | None = None
        self._stop = threading.Event()
        self._closed = False
        self.evictions = EvictionFeed(self.client, self.breaker, namespace, self.replica, where=self.url)
        """Evictions announced to, and read from, the other replicas."""
        self.breaker.call("connect", self.client.ping, False)  # so `up` is right from the start
        self._thread: threading.Thread | None = None
        if publish_every > 0:
            self._thread = threading.Thread(target=self._loop, name="shared-tier-stats", daemon=True)
            self._thread.start()

    # -- state ----------------------------------------------------------------------------

    @property
    def up(self) -> bool:
        """Whether Redis answered the last call (gauge ``tts_shared_tier_up``)."""
        return self.breaker.up

    def leases(self, local: Leases | None) -> SharedLeases:
        """Single-flight leases in Redis, falling back to ``local`` while it is down.
        ``local`` is closed with this tier."""
        self._local_leases = local
        return SharedLeases(self._remote_leases, self.breaker, local)

    # -- audio entries ----------------------------------------------------------------------

    def get(self, key: str) -> bytes | None:
        """The packed entry for ``key`` (its tag checked, its content not: the caller unpacks
        and, if it is damaged, calls :meth:`corrupt`), or None. An entry without a valid tag
        under ``cache.secret`` is None: a miss, made again and written over."""
        value = self.breaker.call("get", lambda: self.client.get(self._audio(key)), None)
        blob = None if value is None else self.signer.check("shared", "entry", key, _raw(value))
        if value is not None and blob is None:
            self._count("rejected")
        self._count("hits" if blob is not None else "misses")
        return blob

    def put(self, key: str, blob: bytes, ttl: float | None = None) -> bool:
        """Store a packed entry; ``ttl`` in seconds (None: kept until Redis evicts it)."""
        if ttl is not None and not ttl > 0:  # also NaN
            return False
        # Beyond the longest TTL accepted (inf included) an entry simply never expires:
        # int(inf * 1000) would raise OverflowError and the entry would never be shared.
        px = None if ttl is None or ttl > MAX_TTL else max(1, int(ttl * 1000))
        blob = self.signer.sign("entry", key, blob)
        done = self.breaker.call("put", lambda: bool(self.client.set(self._audio(key), blob, px=px)), False)
        if done:
            self._count("puts")
        return done

    def corrupt(self, key: str, exc: BaseException) -> None:
        """``key``'s value failed verification: delete it (it will be regenerated) and
        count the fault."""
        self._corrupt("entry", self._audio(key), exc)

    def delete(self, key: str) -> bool:
        return bool(self.breaker.call("delete", lambda: self.client.unlink(self._audio(key)), 0))

    def clear(self) -> int:
        """Delete every audio entry in our namespace (SCAN + UNLINK, never FLUSHDB:
        the database may hold other applications' keys, and our voices), and tell the
        other replicas to clear their local tiers."""
        removed = self.breaker.call("clear", lambda: self._unlink_prefix(self._audio("")), None)
        if removed is not None:
            self.evictions.announce(None)
        return int(removed or 0)

    def evict(self, tag: str) -> int | None:
        """Delete every audio entry of ``tag`` (``engine:model_version`` or
        ``voice:<id>``) and tell the other replicas to drop their local copies; the
        number removed here, or None when Redis cannot be reached."""
        removed = self.breaker.call("evict", lambda: evict_tag(self.client, self._audio(""), tag), None)
        if removed is not None:
            self.evictions.announce(tag)
        return None if removed is None else int(removed)

    def follow_evictions(self, apply: Apply, state_file: Path | None = None) -> None:
        """Apply the other replicas' evictions and clears to this replica's local tiers
        (in a thread, about every second)."""
        self.evictions.follow(apply, state_file)

    # -- statistics -------------------------------------------------------------------------

    def status(self) -> SharedStatus:
        """This replica's view of the tier plus every live replica's counters and
        their sum (``cluster``), for the dashboard and ``/api/cache/stats``."""
        if self.breaker.call("publish", self._publish, False):
            cluster = self.breaker.call("status", self._read_cluster, None)
            if cluster is not None:
                self._last_cluster = cluster
        with self._lock:
            counts = self._counts.copy()
        return {
            "url": self.url,
            "up": self.up,
            "replica": self.replica,
            "namespace": self.namespace,
            "errors": self.breaker.errors,
            "last_error": self.breaker.last_error,
            "down_since": self.breaker.down_since,
            **counts,
            **(self._last_cluster if self._last_cluster is not None else _NO_CLUSTER),
            "stale": not self.up,
        }

    def _publish(self) -> bool:
        fields: dict[Any, float] = {"updated": time.time()}  # Any: redis-py types mapping keys invariantly
        if self._counters is not None:
            try:
                fields.update({k: int(v) for k, v in self._counters().items() if k in _STAT_FIELDS})
            except Exception as exc:  # the stats store may be closing; report the rest
                _LOGGER.debug("cannot read local counters: %s", exc)
        with self._lock:
            fields.update({f"shared_{k}": self._counts[k] for k in _OUTCOMES})
        fields["shared_errors"] = self.breaker.errors
        expiry = max(30.0, self._publish_every * 10)
        pipe = self.client.pipeline(transaction=False)
        name = self.namespace + "stats:" + self.replica
        pipe.hset(name, mapping=fields)
        pipe.pexpire(name, int(expiry * 1000))
        pipe.zadd(self.namespace + "replicas", {self.replica: fields["updated"]})
        pipe.zremrangebyscore(self.namespace + "replicas", "-inf", fields["updated"] - expiry)
        pipe.execute()
        return True

    def _read_cluster(self) -> ClusterState:
        ids = [_text(r) for r in self.client.zrange(self.namespace + "replicas", 0, -1)]
        pipe = self.client.pipeline(transaction=False)
        for rid in ids:
            pipe.hgetall(self.namespace + "stats:" + rid)
        pipe.info("memory")
        *hashes, memory = pipe.execute()
        replicas: list[dict[str, str | float]] = []
        total: dict[str, float] = dict.fromkeys((*_STAT_FIELDS, "shared_hits", "shared_errors"), 0)
        for rid, raw in zip(ids, hashes, strict=True):
            if not raw:
                continue  # expired between the two reads
            row: dict[str, str | float] = {"replica": rid}
            for k, v in raw.items():
                field = _text(k)
                value = float(v) if field == "updated" else int(float(v))
                row[field] = value
                if field in total:
                    total[field] += value
            replicas.append(row)
        lookups = total["hits"] + total["misses"]
        total["hit_rate"] = round(total["hits"] / lookups, 4) if lookups else 0.0
        return {
            "replicas": replicas,
            "cluster": total,
            "redis_memory_bytes": memory.get("used_memory"),
            "redis_maxmemory": memory.get("maxmemory"),
            "redis_maxmemory_policy": memory.get("maxmemory_policy"),
        }

    def _loop(self) -> None:
        # Also the probe that notices Redis coming back when no requests arrive.
        while not self._stop.wait(self._publish_every):
            self.breaker.call("publish", self._publish, False)

    # -- lifecycle --------------------------------------------------------------------------

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        self.evictions.close()
        if self._thread is not None:
            self._thread.join(timeout=2)
        local = self._local_leases
        close_local = getattr(local, "close", None)
        if callable(close_local):
            close_local()
        self.client.close()

    # -- internals --------------------------------------------------------------------------

    def _audio(self, key: str) -> str:
        return self.namespace + "a:" + key

    def _count(self, name: _Outcome) -> None:
        with self._lock:
            self._counts[name] += 1

    def _check(self, kind: str, name: str, value: bytes) -> bytes | None:
        """``value`` (of ``kind``, stored under ``name``) without its tag once checked, or
        None (refused: counted and logged by the signer)."""
        opened = self.signer.check("shared", kind, name, value)
        if opened is None:
            self._count("rejected")
        return opened

    def _corrupt(self, what: str, name: str, exc: BaseException) -> None:
        _LOGGER.warning("shared %s %s is corrupt (%s); deleted, it will be regenerated", what, name, exc)
        self._count("corrupt")
        self.breaker.count(exc)
        self.breaker.call("delete", lambda: self.client.unlink(name), 0)

    def _unlink_prefix(self, prefix: str) -> int:
        removed = 0
        batch: list[bytes] = []
        for name in self.client.scan_iter(match=_escape_glob(prefix) + "*", count=_SCAN_BATCH):
            batch.append(name)
            if len(batch) >= _SCAN_BATCH:
                removed += int(self.client.unlink(*batch))
                batch = []
        if batch:
            removed += int(self.client.unlink(*batch))
        return removed

    def _drop_connections(self) -> None:
        # Idle connections only: one in use belongs to another thread, which would get
        # "I/O operation on closed file" half-way through its command.
        self.client.connection_pool.disconnect(inuse_connections=False)


def _escape_glob(text: str) -> str:
    """``text`` as a literal in a Redis MATCH pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
