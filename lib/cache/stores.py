"""Every store under ``cache.dir``, built in one place: the audio store, the side stores
(saved voices, voice profiles, single-flight locks, statistics), the disk reserve they
share, the size budget they share, and the upkeep thread that looks after them.

Layout::

    <cache.dir>/audio/      results (AudioStore), held to the effective size limit
    <cache.dir>/voices/     saved voices; refuses new ones past 1/4 of cache.size_limit
    <cache.dir>/profiles/   voice profiles (regenerable), LRU within voices.profile_bytes and 1/8 of the limit
    <cache.dir>/locks/      single-flight leases (a few bytes per key being synthesised)
    <cache.dir>/meta/       statistics (counters, at most 1,000 phrases)
    <cache.dir>/disk-reserve  a file deleted when the disk is full (lib.cache.diskutil)

**Size.** The audio store keeps itself within ``cache.size_limit`` less what everything
else here uses (measured every :data:`UPKEEP_EVERY` seconds), but never less than half
the limit; every write-ahead log is bounded (64 KiB per side store, 1/64 of the limit,
64 KiB to 1 MiB, for the audio store). So the whole directory stays within the limit
plus one entry being written and the last transaction in each log (64 KiB in all), as
long as the side stores use under half the limit, which their caps ensure from a limit
of about 8 MiB up.

**Upkeep**, every :data:`UPKEEP_EVERY` seconds: check that each store's directory is
still the one opened (a deleted or replaced directory is recreated even when nobody
writes), evict when the disk is full, write the reserve again, checkpoint a log that
grew past twice its bound, and sweep expired locks.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lib.cache.diskutil import DB_NAME, Reserve, ensure_private_dir, free_bytes, wal_settings
from lib.cache.handle import STORE_ERRORS, DiskHandle
from lib.cache.leases import DiskLeases
from lib.cache.store import AudioStore
from lib.config import CacheConfig

__all__ = ["SIDE_WAL_BYTES", "UPKEEP_EVERY", "LocalStores", "reserve_bytes_for"]

_LOGGER = logging.getLogger(__name__)

UPKEEP_EVERY = 2.0
"""Seconds between upkeep rounds."""
SIDE_WAL_BYTES = 64 * 1024
"""Write-ahead log bound of each side store."""
RESERVE_NAME = "disk-reserve"


def reserve_bytes_for(size_limit: int) -> int:
    """The disk reserve: 1/64 of the limit, 128 KiB to 1 MiB (SQLite needs about 64 KiB
    to open a store and delete a batch of rows)."""
    return min(1024 * 1024, max(128 * 1024, size_limit // 64))


class LocalStores:
    """The stores of one cache directory. Thread-safe; :meth:`close` stops the upkeep."""

    def __init__(
        self,
        config: CacheConfig,
        on_error: Callable[[str, BaseException], None] = lambda op, exc: None,
        *,
        profile_bytes: int = 256 * 1024**2,
        upkeep_every: float = UPKEEP_EVERY,
    ) -> None:
        """``profile_bytes``: the voice profiles' budget (``voices.profile_bytes``)."""
        self.config = config
        self.root = Path(config.dir)
        with contextlib.suppress(OSError):
            ensure_private_dir(self.root)  # failures are reported by each store's handle
        self.reserve = Reserve(self.root / RESERVE_NAME, reserve_bytes_for(config.size_limit))
        self.reserve.restore()
        side: dict[str, Any] = {
            "on_error": on_error, "on_full": self.make_room, "reserve": self.reserve, **wal_settings(SIDE_WAL_BYTES),
        }  # fmt: skip
        self.voices = DiskHandle(
            self.root / "voices", name="voice", eviction_policy="none", size_limit=config.size_limit // 4, **side
        )
        # Profiles are derived data, LRU within their budget (and an eighth of the cache,
        # so that the side stores stay under half of it); one out per write: ten
        # profiles of a real model can be the whole budget.
        self.profiles = DiskHandle(
            self.root / "profiles", name="voice profile", disposable=True, eviction_policy="least-recently-used",
            size_limit=min(profile_bytes, max(256 * 1024, config.size_limit // 8)), cull_limit=1, **side,
        )  # fmt: skip
        self.meta = DiskHandle(self.root / "meta", name="statistics", eviction_policy="none", **side)
        self.locks = DiskLeases(str(self.root / "locks"), **side)
        self._side_bytes = (0.0, 0)
        self._side_lock = threading.Lock()
        self.audio = AudioStore(config, self.root / "audio", on_error, others=self.side_bytes, reserve=self.reserve)
        self.audio.handle.on_full = self.make_room
        self._room = threading.Lock()
        self._stop = threading.Event()
        self._rounds = 0
        self._thread: threading.Thread | None = None
        if upkeep_every > 0:
            self._thread = threading.Thread(target=self._loop, args=(upkeep_every,), name="cache-upkeep", daemon=True)
            self._thread.start()

    @property
    def handles(self) -> dict[str, DiskHandle]:
        """Every store's handle by role, for health reports."""
        return {
            "audio": self.audio.handle, "voices": self.voices, "profiles": self.profiles,
            "locks": self.locks.handle, "statistics": self.meta,
        }  # fmt: skip

    # -- size ---------------------------------------------------------------------------

    def side_bytes(self, max_age: float = 0.5) -> int:
        """Bytes used in the cache directory by everything but the audio store, each
        write-ahead log counted at its bound (measured at most every ``max_age``
        seconds: the audio store asks on every write, and a walk over the side stores'
        files costs about 0.3 ms)."""
        measured_at, size = self._side_bytes
        now = time.monotonic()
        if now - measured_at < max_age:
            return size
        with self._side_lock:
            size = _tree_bytes(self.root, skip=self.audio.directory, wal_bound=SIDE_WAL_BYTES)
            self._side_bytes = (time.monotonic(), size)
        return size

    def make_room(self) -> None:
        """The disk is full: release the reserve if SQLite lacks room to work, evict
        from the audio store down to what fits, write the reserve again."""
        if not self._room.acquire(blocking=False):
            return  # already making room (the eviction itself may hit the full disk)
        try:
            if free_bytes(self.root) < self.audio.wal_bytes:
                self.reserve.release()
            removed = self.audio.make_room()
            if removed:
                _LOGGER.warning("disk full: evicted %d entries from the audio store to make room", removed)
        finally:
            self._room.release()

    def verify_side(self) -> list[str]:
        """SQLite's ``quick_check`` on every side store; a damaged one is moved aside and
        a fresh one opened. Returns what was repaired."""
        repairs: list[str] = []
        for name, handle in self.handles.items():
            if name == "audio":
                continue  # AudioStore.verify checks it, with its entries
            known = set(handle.repairs)
            handle.verify_database()
            repairs += [message for message in handle.repairs if message not in known]
        return repairs

    # -- upkeep -------------------------------------------------------------------------

    def upkeep(self) -> None:
        """One round of upkeep (see the module docstring); never raises."""
        self._rounds += 1
        for handle in self.handles.values():
            handle.open(write=True)  # notices a deleted or replaced directory, reopens
        stats = self.audio.stats()
        if stats.get("disk_full") or free_bytes(self.root) < self.audio.wal_bytes:
            self.make_room()
        if self.root.is_dir():
            self.reserve.restore()
        for name, handle in self.handles.items():
            bound = self.audio.wal_bytes if name == "audio" else SIDE_WAL_BYTES
            _checkpoint_if_over(handle.directory, 2 * bound)
        if self._rounds % 30 == 1:
            self.locks.sweep()

    def _loop(self, every: float) -> None:
        while not self._stop.wait(every):
            try:
                self.upkeep()
            except Exception:  # upkeep must never die; the stores report their own faults
                _LOGGER.exception("cache upkeep failed")

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.audio.close()
        self.voices.close()
        self.profiles.close()
        self.meta.close()
        self.locks.close()
        # diskcache closes only the calling thread's connection; the other threads'
        # go with the dropped caches, which sit in reference cycles: collect them now,
        # so that no database file stays open (an unmount, a deleted directory).
        gc.collect()


def _tree_bytes(root: Path, skip: Path, wal_bound: int) -> int:
    total = 0
    for path, dirs, files in os.walk(root):
        if Path(path) == skip.parent:
            dirs[:] = [d for d in dirs if d != skip.name]
        for name in files:
            with contextlib.suppress(OSError):
                size = os.lstat(os.path.join(path, name)).st_size
                total += max(size, wal_bound) if name.endswith("-wal") else size
    return total


def _checkpoint_if_over(directory: Path, bound: int) -> None:
    """Checkpoint and truncate a write-ahead log that grew past ``bound`` (a reader
    held an old snapshot through several automatic checkpoints)."""
    try:
        if os.path.getsize(directory / f"{DB_NAME}-wal") <= bound:
            return
    except OSError:
        return
    with (
        contextlib.suppress(*STORE_ERRORS),
        contextlib.closing(sqlite3.connect(str(directory / DB_NAME), timeout=1.0)) as con,
    ):
        con.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
