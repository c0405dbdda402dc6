"""The app's own eviction on top of diskcache, for ``cache.eviction_policy: cost-aware``.

diskcache is opened with ``eviction_policy="none"``: it then neither culls nor writes
on reads (its LRU updates ``access_time`` in SQLite on every hit). :class:`Keeper`
holds a :class:`lib.cache.policy.CostAwarePolicy` in memory, tells it what the store
does, and culls by its choice. Hits touch memory only; the policy's state is persisted
lazily in two tables of the store's own ``cache.db``, so it is deleted with the store
and survives restarts:

- ``PolicyEntry(key, cost, freq)``: each entry's engine seconds and (decayed) request count
  (written when the entry is, counts folded in every ``flush_every`` seconds and at close);
- ``PolicyPin(name, digest, keys)``: the current pinned lists (see ``pin``).

Several processes may share the store (a server and ``preload_cache.py``): each keeps
its own counts and folds them into the table; a cull that finds fewer evictable
entries than it needs (another process wrote them) reloads the rows, and pins written
by another process are picked up before every cull.

It uses diskcache's connection (``cache._con``) and its ``Cache`` table's columns
(``key``, ``size``, ``value``); diskcache is pinned in requirements.txt.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable
from typing import Any

import diskcache

from lib.cache.entry import CorruptEntryError, read_header
from lib.cache.policy import CostAwarePolicy

__all__ = ["Keeper"]

_LOGGER = logging.getLogger(__name__)

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS PolicyEntry (key TEXT PRIMARY KEY, cost REAL NOT NULL, freq REAL NOT NULL)",
    "CREATE TABLE IF NOT EXISTS PolicyPin (name TEXT PRIMARY KEY, digest TEXT NOT NULL, keys TEXT NOT NULL)",
)
_DEFAULT_COST = 1.0
"""Engine seconds assumed for an entry whose cost is unknown (no ``engine_seconds`` in
its header and none known in the store)."""


def _con(cache: diskcache.Cache) -> Any:
    return cache._con  # diskcache's per-thread SQLite connection (autocommit)


class Keeper:
    """Eviction by :class:`CostAwarePolicy` for one diskcache store."""

    def __init__(self, size_limit: int, *, pin_fraction: float, flush_every: float = 5.0) -> None:
        self.policy = CostAwarePolicy(limit=size_limit, pin_fraction=pin_fraction)
        self.flush_every = flush_every
        self._loaded: diskcache.Cache | None = None
        self._load_lock = threading.Lock()
        self._last_flush = time.monotonic()
        self._pin_digests: dict[str, str] = {}

    # -- loading ------------------------------------------------------------------------

    def attach(self, cache: diskcache.Cache) -> None:
        """Load the policy from ``cache`` if it is not the store last loaded (first use,
        or the handle reopened the store)."""
        if cache is self._loaded:
            return
        with self._load_lock:
            if cache is not self._loaded:
                self._load(cache)
                self._loaded = cache

    def _load(self, cache: diskcache.Cache) -> None:
        con = _con(cache)
        for statement in _SCHEMA:
            con.execute(statement)
        con.execute("DELETE FROM PolicyEntry WHERE key NOT IN (SELECT key FROM Cache)")
        rows = con.execute(
            "SELECT c.key, CASE WHEN c.size > 0 THEN c.size ELSE length(c.value) END, p.cost, p.freq "
            "FROM Cache c LEFT JOIN PolicyEntry p ON p.key = c.key"
        ).fetchall()
        known = [cost for _, _, cost, _ in rows if cost is not None]
        default = sorted(known)[len(known) // 2] if known else _DEFAULT_COST
        self.policy.clear()
        for key, size, cost, freq in rows:
            if isinstance(key, str):
                self.policy.added(key, int(size or 0), default if cost is None else float(cost), freq=freq or 1)
        self._sync_pins(cache, force=True)
        _LOGGER.debug("eviction policy loaded %d entries", len(rows))

    # -- the store's events -------------------------------------------------------------

    def hit(self, key: str) -> None:
        self.policy.hit(key)

    def admits(self, cache: diskcache.Cache, key: str, blob: bytes, *, requested: bool, limit: int) -> bool:
        self.attach(cache)
        if not requested:
            self._sync_pins(cache)
        free = max(0, limit - int(cache.volume()))
        return self.policy.admits(key, len(blob), _cost(blob), requested=requested, free=free)

    def added(self, cache: diskcache.Cache, key: str, blob: bytes, *, requested: bool) -> None:
        self.attach(cache)
        cost = _cost(blob)
        self.policy.added(key, len(blob), cost, requested=requested)
        _con(cache).execute(
            "INSERT OR REPLACE INTO PolicyEntry (key, cost, freq) VALUES (?, ?, ?)",
            (key, cost, self.policy.frequency(key)),
        )
        if time.monotonic() - self._last_flush > self.flush_every:
            self.flush(cache)

    def removed(self, key: str) -> None:
        self.policy.removed(key)

    def reload(self, cache: diskcache.Cache) -> None:
        """After removals the policy did not see (expire, evict by tag, clear)."""
        self.flush(cache)
        with self._load_lock:
            self._load(cache)
            self._loaded = cache

    def cull(self, cache: diskcache.Cache, limit: int, *, protect: str | None = None) -> int:
        """Evict by the policy until the store's volume is within ``limit``."""
        self.attach(cache)
        self._sync_pins(cache)
        removed = 0
        if cache.expire():
            self.reload(cache)
        retried = False
        while (over := int(cache.volume()) - limit) > 0:
            victims = self.policy.victims(over, protect=protect)
            if not victims:
                if retried:
                    _LOGGER.warning("cache is %d bytes over its limit and nothing more may be evicted", over)
                    break
                retried = True
                self.reload(cache)  # another process wrote entries this one does not know
                continue
            for key in victims:
                cache.delete(key)
                self.policy.removed(key)
                removed += 1
            _con(cache).executemany("DELETE FROM PolicyEntry WHERE key = ?", [(key,) for key in victims])
        return removed

    # -- pins ---------------------------------------------------------------------------

    def pin(self, cache: diskcache.Cache, name: str, keys: Iterable[str]) -> str:
        self.attach(cache)
        keys = sorted(set(keys))
        digest = self.policy.pin(name, keys)
        con = _con(cache)
        if keys:
            con.execute(
                "INSERT OR REPLACE INTO PolicyPin (name, digest, keys) VALUES (?, ?, ?)",
                (name, digest, json.dumps(keys)),
            )
            self._pin_digests[name] = digest
        else:
            con.execute("DELETE FROM PolicyPin WHERE name = ?", (name,))
            self._pin_digests.pop(name, None)
        return digest

    def _sync_pins(self, cache: diskcache.Cache, *, force: bool = False) -> None:
        """Pick up lists pinned (or unpinned) by another process."""
        con = _con(cache)
        current = dict(con.execute("SELECT name, digest FROM PolicyPin").fetchall())
        if not force and current == self._pin_digests:
            return
        for name in set(self.policy.pins()) - set(current):
            self.policy.pin(name, ())
        for name, digest in current.items():
            if force or self._pin_digests.get(name) != digest:
                row = con.execute("SELECT keys FROM PolicyPin WHERE name = ?", (name,)).fetchone()
                self.policy.pin(name, json.loads(row[0]) if row else ())
        self._pin_digests = current

    # -- persistence --------------------------------------------------------------------

    def flush(self, cache: diskcache.Cache | None) -> None:
        """Fold the counts changed in memory into ``PolicyEntry``."""
        self._last_flush = time.monotonic()
        if cache is None or cache is not self._loaded:
            return
        dirty = self.policy.take_dirty()
        if dirty:
            _con(cache).executemany(
                "UPDATE PolicyEntry SET freq = ? WHERE key = ?", [(n, key) for key, n in dirty.items()]
            )


def _cost(blob: bytes) -> float:
    """The engine seconds an entry cost to make, from its header."""
    try:
        value = read_header(blob[:65536]).get("engine_seconds")
    except CorruptEntryError:
        return _DEFAULT_COST
    return float(value) if isinstance(value, (int, float)) and value >= 0 else _DEFAULT_COST
