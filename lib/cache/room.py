"""How much the audio store may hold right now: its *effective limit*.

``cache.size_limit`` bounds the whole cache directory, not only diskcache's own count.
Before each write the audio store asks :class:`Room` for the limit, which is the
configured one less what the rest of the directory uses (the side stores for voices,
profiles, locks and statistics, every write-ahead log counted at its bound, the disk
reserve; never less than half the limit), and no more than the disk can hold with
headroom for the log (and for writing the reserve again). When the disk fills up, with
our entries or anything else, the limit drops to what fits, with a log line; when
space returns it goes back up.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import diskcache

from lib.cache.diskutil import Reserve, disk_bytes, extra_files_bytes, free_bytes
from lib.config import CacheConfig
from lib.core.ratelimit import LogLimiter

__all__ = ["Room", "wal_bytes_for"]

_LOGGER = logging.getLogger(__name__)
_LIMITED = LogLimiter(_LOGGER, every=60.0)

_MARGIN = 256 * 1024  # free space kept beyond the write-ahead log's bound


def wal_bytes_for(size_limit: int) -> int:
    """The audio store's write-ahead log bound: 1/64 of the limit, 64 KiB to 1 MiB."""
    return min(1024 * 1024, max(64 * 1024, size_limit // 64))


class Room:
    """The audio store's effective limit, measured on demand. Thread-safe enough:
    it only reads the filesystem and the store, and keeps a few numbers."""

    def __init__(
        self,
        config: CacheConfig,
        directory: Path,
        on_error: Callable[[str, BaseException], None],
        *,
        others: Callable[[], int],
        reserve: Reserve | None,
    ) -> None:
        self.config = config
        self.directory = directory
        self._on_error = on_error
        self._others = others
        self.reserve = reserve
        # The log's bound, smaller on a small filesystem (it must never be what fills it).
        self.wal_bytes = min(wal_bytes_for(config.size_limit), max(64 * 1024, disk_bytes(directory) // 16))
        self.effective_limit = config.size_limit
        self._lowered: int | None = None
        """The effective limit while the disk holds less than the configured one."""
        self._extra = (0.0, 0)  # (monotonic time measured, bytes): logs beside the database

    @property
    def disk_full(self) -> bool:
        """Whether the disk holds the store below its limit now."""
        return self._lowered is not None

    def limit(self, cache: diskcache.Cache) -> int:
        """The effective limit now (see the module docstring)."""
        size_limit = self.config.size_limit
        budget = max(size_limit // 2, size_limit - self._others() - self._extra_bytes())
        headroom = self.wal_bytes + _MARGIN
        if self.reserve is not None and not self.reserve.present:
            headroom += self.reserve.size
        headroom = min(headroom, disk_bytes(self.directory) // 4)  # a tiny filesystem
        fits = int(cache.volume()) + free_bytes(self.directory) - headroom
        limit = max(0, min(budget, fits))
        self._note(limit, fits < budget)
        self.effective_limit = limit
        return limit

    def release_reserve(self) -> bool:
        """The disk filled up between a measure and a write: free the reserve."""
        return self.reserve is not None and self.reserve.release()

    def restore_reserve(self) -> None:
        """Write the reserve again, if it was released and there is room now."""
        if self.reserve is not None:
            self.reserve.restore()

    def _note(self, limit: int, by_disk: bool) -> None:
        if by_disk:
            if self._lowered is None or limit < self._lowered * 0.9:
                _LIMITED.log(
                    logging.WARNING, f"disk-full:{limit >> 20}",
                    "the disk under %s is full: the audio store is held to %.1f MiB instead of cache.size_limit "
                    "(%.1f MiB), evicting to make room, until space returns",
                    self.directory, limit / 2**20, self.config.size_limit / 2**20,
                )  # fmt: skip
                self._on_error("full", OSError("disk full"))
            self._lowered = limit
        elif self._lowered is not None:
            self._lowered = None
            _LOGGER.warning("the disk under %s has room again: the audio store is back to its limit", self.directory)

    def _extra_bytes(self) -> int:
        """The store's files beside its database, its log counted at its bound (it
        grows to that between checkpoints)."""
        measured_at, size = self._extra
        now = time.monotonic()
        if now - measured_at > 1.0:
            size = extra_files_bytes(self.directory, wal_bound=self.wal_bytes)
            self._extra = (now, size)
        return size
