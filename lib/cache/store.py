"""The disk tier: a size-limited, private ``diskcache`` store of packed entries.

Failures of the store never fail a request: every operation goes through a
:class:`lib.cache.handle.DiskHandle`, which reports the store's own errors, moves a
damaged database aside and reopens the store, and answers as if the entry were absent
meanwhile.

**The size limit holds on disk.** Before each write the store asks its
:class:`lib.cache.room.Room` for the *effective limit* (``cache.size_limit`` less what
the rest of the cache directory uses, and no more than the disk can hold) and evicts
down to it, by diskcache's policy or, for ``cost-aware``, by the app's own
(:mod:`lib.cache.keeper`). When the disk fills up, hits keep being served and writing
goes on at the lower limit; when space returns the limit goes back up.
"""

from __future__ import annotations

import logging
import os
import warnings
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, suppress
from pathlib import Path
from typing import Any

import diskcache

from lib.cache.diskutil import Reserve, is_full, wal_settings
from lib.cache.entry import CachedAudio, CorruptEntryError, EntryHeader, pack, read_header, unpack
from lib.cache.handle import STORE_ERRORS, DiskHandle
from lib.cache.keeper import Keeper
from lib.cache.keys import KEY_RE
from lib.cache.room import Room
from lib.config import CacheConfig
from lib.core.ratelimit import LogLimiter
from lib.core.reports import StoreStats, VerifyReport

__all__ = ["AudioStore", "directory_bytes"]

_LOGGER = logging.getLogger(__name__)
_LIMITED = LogLimiter(_LOGGER, every=60.0)

_HEADER_PEEK = 64 * 1024  # header bytes read at most when scanning entries by voice or text
_FIRST_PEEK = 4096  # read first: most headers are shorter


class AudioStore:
    """Packed :class:`CachedAudio` entries in ``directory`` (normally
    ``<cache.dir>/audio``), held under ``config.size_limit``."""

    def __init__(
        self,
        config: CacheConfig,
        directory: Path,
        on_error: Callable[[str, BaseException], None],
        *,
        others: Callable[[], int] = lambda: 0,
        reserve: Reserve | None = None,
    ) -> None:
        """``others``: bytes the rest of the cache directory uses now (side stores,
        their logs, the reserve); the store keeps itself within the limit less that.
        ``reserve``: the cache's disk reserve, released when the disk is full."""
        self.config = config
        self.directory = directory
        self._on_error = on_error
        self.room = Room(config, directory, on_error, others=others, reserve=reserve)
        # cost-aware: the app's own bookkeeping culls (lib/cache/keeper.py); diskcache's
        # built-in policies otherwise.
        self._keeper: Keeper | None = None
        if config.eviction_policy == "cost-aware":
            self._keeper = Keeper(config.size_limit, pin_fraction=config.pin_fraction)
        settings: dict[str, Any] = wal_settings(self.room.wal_bytes)
        self._disk = DiskHandle(
            directory,
            name="cache",
            on_error=on_error,
            reserve=reserve,
            disposable=True,
            size_limit=config.size_limit,
            eviction_policy="none" if self._keeper is not None else config.eviction_policy,
            cull_limit=10,
            statistics=False,
            tag_index=True,
            # Every entry in a file of its own, only a small row in SQLite: inline values
            # (diskcache's default below 32 KiB) make eviction rewrite many pages of the
            # database (auto-vacuum), and the write-ahead log balloon with them.
            disk_min_file_size=4096,
            **settings,
        )
        self._disk.open()

    def _using(self, op: str, *, write: bool = False) -> AbstractContextManager[diskcache.Cache | None]:
        return self._disk.using(op, write=write)

    @property
    def wal_bytes(self) -> int:
        return self.room.wal_bytes

    @property
    def effective_limit(self) -> int:
        return self.room.effective_limit

    @property
    def disk_full(self) -> bool:
        """Whether the disk holds the store below its limit now."""
        return self.room.disk_full

    @property
    def handle(self) -> DiskHandle:
        """The store's handle (for health checks and upkeep)."""
        return self._disk

    @property
    def available(self) -> bool:
        return self._disk.available

    @property
    def last_error(self) -> str | None:
        return self._disk.last_error

    # -- entries ------------------------------------------------------------------------

    def get(self, key: str) -> CachedAudio | None:
        """The verified entry, or None. A damaged entry is deleted and reported."""
        with self._using("get") as cache:
            if cache is None:
                return None
            blob = cache.get(key)
            if blob is None:
                return None
            try:
                entry = unpack(blob, key)
            except CorruptEntryError as exc:
                _LOGGER.warning("cache entry %s is corrupt (%s); evicted, it will be regenerated", key, exc)
                cache.delete(key)
                self._removed(key)
                self._on_error("corrupt", exc)
            else:
                if self._keeper is not None:
                    self._keeper.hit(key)  # in memory only; persisted lazily
                return entry
        return None

    def get_blob(self, key: str) -> bytes | None:
        """The packed bytes, unverified (for copying to another tier)."""
        with self._using("get") as cache:
            if cache is not None:
                blob = cache.get(key)
                return blob if isinstance(blob, bytes) else None
        return None

    def contains(self, key: str) -> bool:
        with self._using("contains") as cache:
            return cache is not None and key in cache
        return False

    def put(self, entry: CachedAudio, *, tag: str, ttl: float | None, origin: str = "user") -> bool:
        """Store ``entry`` unless it is too large; hold the size limit. True if stored."""
        return self.put_blob(entry.key, pack(entry), tag=tag, ttl=ttl, origin=origin)

    def put_blob(self, key: str, blob: bytes, *, tag: str, ttl: float | None, origin: str = "user") -> bool:
        """``origin`` ``preload``: a prediction, not a request (the cost-aware policy
        stores it only where it displaces nothing anyone asks for, unless pinned)."""
        if not KEY_RE.match(key):
            raise ValueError(f"not a cache key: {key!r}")
        largest = self.config.size_limit * self.config.max_entry_fraction
        if len(blob) > largest:
            _LIMITED.log(
                logging.WARNING, "too-large",
                "entry %s is %d bytes, over cache.max_entry_fraction (%g) of cache.size_limit; served but not stored",
                key, len(blob), self.config.max_entry_fraction,
            )  # fmt: skip
            return False
        expire = ttl if ttl is not None else self.config.ttl
        requested = origin != "preload"
        keeper = self._keeper
        with self._using("put", write=True) as cache:
            if cache is None:
                return False
            for attempt in (1, 2):
                limit = self.room.limit(cache)
                if len(blob) > limit:
                    _LIMITED.log(
                        logging.WARNING, "no-room",
                        "no room on disk for entry %s (%d bytes, effective limit %d bytes); served but not stored",
                        key, len(blob), limit,
                    )  # fmt: skip
                    return False
                if keeper is not None and not keeper.admits(cache, key, blob, requested=requested, limit=limit):
                    return False
                self._hold(cache, limit - len(blob))  # room first: the disk may be nearly full
                try:
                    cache.set(key, blob, expire=expire, tag=tag)
                except STORE_ERRORS as exc:
                    # The disk filled up between the measure and the write (another
                    # writer, another process): free the reserve, measure again, once.
                    if attempt == 2 or not is_full(exc) or not self.room.release_reserve():
                        raise
                    continue
                if keeper is not None:
                    keeper.added(cache, key, blob, requested=requested)
                # diskcache culls at most cull_limit items per write, so its limit is
                # soft; cull fully here so the store never exceeds the limit by more
                # than one entry.
                self._hold(cache, limit, protect=key)
                break
            if self.room.disk_full:
                self.room.restore_reserve()
            return True
        return False

    def _hold(self, cache: diskcache.Cache, limit: int, protect: str | None = None) -> int:
        """Evict (expired entries first, then by policy) until the store's volume is at
        most ``limit``. diskcache's own limit is lowered in this process only, never
        written to its settings. Returns how many entries were removed."""
        limit = max(0, limit)
        if self._keeper is None and cache.size_limit != limit:
            cache.reset("size_limit", limit, update=False)
        if cache.volume() <= limit:
            return 0
        if self._keeper is not None:
            return self._keeper.cull(cache, limit, protect=protect)
        return int(cache.cull())

    def make_room(self) -> int:
        """Evict down to the effective limit now (the disk filled up), then write the
        disk reserve again if it was released. Returns how many entries were removed."""
        removed = 0
        with self._using("evict", write=True) as cache:
            if cache is not None:
                removed = self._hold(cache, self.room.limit(cache))
        self.room.restore_reserve()
        return removed

    def delete(self, key: str) -> bool:
        with self._using("delete", write=True) as cache:
            self._removed(key)
            return bool(cache is not None and cache.delete(key))
        return False

    def pin(self, name: str, keys: list[str]) -> str | None:
        """Make ``keys`` the current pinned set of the list ``name`` (``preload``, or a
        template's pieces): never evicted until ``name`` is pinned again with other keys
        (``[]`` unpins), within ``cache.pin_fraction`` of the limit. Returns the list's
        digest; None when the policy has no pins (not ``cost-aware``) or the store is
        unavailable."""
        if self._keeper is None:
            return None
        with self._using("pin", write=True) as cache:
            if cache is not None:
                return self._keeper.pin(cache, name, keys)
        return None

    def _removed(self, key: str) -> None:
        if self._keeper is not None:
            self._keeper.removed(key)

    def _resync(self, cache: diskcache.Cache) -> None:
        """After bulk removals the policy did not see one by one."""
        if self._keeper is not None:
            self._keeper.reload(cache)

    # -- administration -----------------------------------------------------------------

    def stats(self) -> StoreStats:
        entries = size = 0
        with self._using("stats") as cache:
            if cache is not None:
                entries, size = len(cache), cache.volume()
        return {
            "entries": entries, "bytes": size, "size_limit": self.config.size_limit,
            "effective_limit": self.room.effective_limit, "disk_full": self.room.disk_full,
        }  # fmt: skip

    def clear(self) -> int:
        with self._using("clear", write=True) as cache:
            if cache is not None:
                removed = int(cache.clear())
                self._resync(cache)
                return removed
        return 0

    def evict(self, tag: str) -> int:
        """Drop every entry with ``tag`` (``engine:model_version``), or, for
        ``voice:<fingerprint>``, every entry made in that voice."""
        if tag.startswith("voice:"):
            voice = tag[len("voice:") :]
            return self._evict_where(lambda head: head.get("voice") == voice)
        with self._using("evict", write=True) as cache:
            if cache is not None:
                removed = int(cache.evict(tag))
                self._resync(cache)
                return removed
        return 0

    def tags(self) -> dict[str, int]:
        """How many entries each tag (``engine:model_version``) has, so that an operator
        evicts a model version that is actually present instead of typing one.

        diskcache has no public call for this; its tag column is indexed
        (``tag_index=True``), so one grouped query over it is cheap."""
        with self._using("tags") as cache:
            if cache is not None:
                rows = cache._sql("SELECT tag, COUNT(*) FROM Cache WHERE tag IS NOT NULL GROUP BY tag").fetchall()
                return {str(tag): int(count) for tag, count in rows}
        return {}

    def expire(self) -> int:
        """Remove expired entries now (they are never served in any case)."""
        with self._using("expire", write=True) as cache:
            if cache is not None:
                removed = int(cache.expire())
                if removed:
                    self._resync(cache)
                return removed
        return 0

    def verify(self, plausible: Callable[[CachedAudio], str | None] | None = None) -> VerifyReport:
        """Check the database itself (SQLite ``quick_check``: a damaged one is moved
        aside and a fresh store opened), every entry's checksum and the store's own
        consistency (orphan files, sizes); repair what is wrong. With ``plausible``,
        entries it finds a problem with (audio implausible for its text) are removed too.
        Returns what was done."""
        checked = corrupt = implausible = 0
        known = set(self._disk.repairs)
        self._disk.verify_database()
        found: list[str] = []
        available = False
        with self._using("verify", write=True) as cache:
            if cache is not None:
                available = True
                for key in list(cache.iterkeys()):
                    blob = cache.get(key)
                    if blob is None:
                        continue
                    checked += 1
                    try:
                        entry = unpack(blob, key)
                    except CorruptEntryError:
                        corrupt += 1
                        cache.delete(key)
                        continue
                    problem = plausible(entry) if plausible is not None else None
                    if problem is not None:
                        _LOGGER.warning("verify: removed entry %s: its audio is implausible (%s)", key, problem)
                        implausible += 1
                        if cache.delete(key):
                            self._removed(key)
                with warnings.catch_warnings():
                    # check() records its findings as warnings; make sure they are recorded
                    # and returned, never raised, whatever filters the process has.
                    warnings.simplefilter("always")
                    found = [str(w.message) for w in cache.check(fix=True)]
                self._resync(cache)
        # The database moved aside (by quick_check, or on damage met while checking).
        repairs = [message for message in self._disk.repairs if message not in known] + found
        return {
            "checked": checked, "corrupt_removed": corrupt, "implausible_removed": implausible,
            "repairs": repairs, "available": available,
        }  # fmt: skip

    def close(self) -> None:
        if self._keeper is not None:
            with self._using("close") as cache:
                self._keeper.flush(cache)
        self._disk.close()

    def count_where(self, match: Callable[[EntryHeader], bool]) -> int | None:
        """How many entries' headers (their metadata, never the audio) ``match``; None
        when the store cannot be read. An admin action: O(entries), about 20 µs each."""
        with self._using("count") as cache:
            if cache is None:
                return None
            return sum(1 for _key, head in _headers(cache) if match(head))
        return None

    def _evict_where(self, match: Callable[[EntryHeader], bool]) -> int:
        removed = 0
        with self._using("evict", write=True) as cache:
            if cache is None:
                return 0
            for key, head in _headers(cache):
                if match(head) and cache.delete(key):
                    self._removed(key)
                    removed += 1
        return removed


def _headers(cache: diskcache.Cache) -> Iterator[tuple[Any, EntryHeader]]:
    """Every entry's key and header, read from the first bytes of its value only; an
    entry gone meanwhile or not readable is skipped."""
    for key in list(cache.iterkeys()):
        handle = cache.get(key, read=True)
        if handle is None:
            continue
        if isinstance(handle, bytes):  # small values live in SQLite, not in files
            head_bytes = handle[:_HEADER_PEEK]
        else:
            try:
                head_bytes = handle.read(_FIRST_PEEK)
                if len(head_bytes) >= 8:  # a header longer than the first read (a long text): the rest of it
                    size = int.from_bytes(head_bytes[4:8], "little")
                    if 8 + size > len(head_bytes):
                        head_bytes += handle.read(min(8 + size, _HEADER_PEEK) - len(head_bytes))
            finally:
                handle.close()
        try:
            head = read_header(head_bytes)
        except CorruptEntryError:
            continue
        yield key, head


def directory_bytes(path: str | os.PathLike[str]) -> int:
    """Total size of the files under ``path`` (for tests and the dashboard)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            with suppress(OSError):
                total += os.path.getsize(os.path.join(root, name))
    return total
