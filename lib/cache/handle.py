"""A diskcache handle that survives its directory: every store on disk (the audio
store, and the side stores for voices, locks and statistics) holds one.

Failures of the store never fail a request. :meth:`DiskHandle.using` hands out the open
cache (or None while it is unavailable) and catches the store's own errors (SQLite, OS,
lock time-outs): it logs and counts them through ``on_error`` and drops the handle, so
the next call after a back-off reopens the store. A store that could not be opened
(missing, unwritable or full directory) is therefore reopened on a later call, and the
cache recovers by itself once the problem is fixed.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import diskcache

from lib.cache.diskutil import open_cache

__all__ = ["STORE_ERRORS", "DiskHandle"]

_LOGGER = logging.getLogger(__name__)

#: What a store may raise that means "the store failed", not "the code is wrong".
STORE_ERRORS: tuple[type[BaseException], ...] = (sqlite3.Error, OSError, diskcache.Timeout)
REOPEN_AFTER = 5.0
"""Seconds between attempts to reopen a failed store."""


class DiskHandle:
    """One private diskcache at ``directory``, opened on first use and reopened after
    a failure. Thread-safe."""

    def __init__(
        self,
        directory: Path,
        *,
        name: str,
        on_error: Callable[[str, BaseException], None] = lambda op, exc: None,
        **settings: Any,
    ) -> None:
        self.directory = directory
        self.name = name
        self._settings = settings
        self._on_error = on_error
        self._cache: diskcache.Cache | None = None
        self._next_open = 0.0
        self._lock = threading.Lock()
        self.last_error: str | None = None

    def open(self) -> diskcache.Cache | None:
        """The open cache, or None while it cannot be opened (retried after a back-off)."""
        cache = self._cache
        if cache is not None:  # not ``self._cache or``: an empty Cache is falsy
            return cache
        with self._lock:
            if self._cache is not None:
                return self._cache
            now = time.monotonic()
            if now < self._next_open:
                return None
            try:
                self._cache = open_cache(self.directory, **self._settings)
            except STORE_ERRORS as exc:
                self._next_open = now + REOPEN_AFTER
                self._report("open", exc)
                return None
            if self.last_error:
                _LOGGER.warning("%s store at %s is available again", self.name, self.directory)
            self.last_error = None
            return self._cache

    @contextmanager
    def using(self, op: str) -> Iterator[diskcache.Cache | None]:
        """``with handle.using("get") as cache:`` -- ``cache`` is None while the store
        is unavailable; a store error inside the block is reported, not raised."""
        cache = self.open()
        try:
            yield cache
        except STORE_ERRORS as exc:
            if isinstance(exc, sqlite3.OperationalError) and "full" in str(exc):
                self._report(op, exc)  # disk full: keep the handle, eviction may free space
            else:
                self.broken(op, exc)

    def broken(self, op: str, exc: BaseException) -> None:
        """Report ``exc``, and drop the handle so that a later call reopens the store."""
        self._report(op, exc)
        with self._lock:
            cache, self._cache = self._cache, None
            self._next_open = time.monotonic() + REOPEN_AFTER
        if cache is not None:
            with suppress(*STORE_ERRORS):
                cache.close()

    @property
    def available(self) -> bool:
        return self.open() is not None

    def close(self) -> None:
        with self._lock:
            cache, self._cache = self._cache, None
        if cache is not None:
            with suppress(*STORE_ERRORS):
                cache.close()

    def _report(self, op: str, exc: BaseException) -> None:
        message = f"{op}: {type(exc).__name__}: {exc}"
        if message != self.last_error:
            _LOGGER.error("%s store %s failed (%s); serving without it", self.name, self.directory, message)
        self.last_error = message
        self._on_error(op, exc)
