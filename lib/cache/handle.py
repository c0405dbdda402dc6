"""A diskcache handle that survives its directory: every store on disk (the audio
store, and the side stores for voices, profiles, locks and statistics) holds one.

Failures of the store never fail a request. :meth:`DiskHandle.using` hands out the open
cache (or None while it is unavailable) and catches the store's own errors (SQLite, OS,
lock time-outs); what happens next depends on the fault:

- **damaged database** (truncated, overwritten: "malformed", "not a database"): the
  file is moved aside as ``cache.db.damaged-<time>`` with a log line and a fresh store
  is opened at once, without a restart;
- **directory deleted or replaced** under the running process (SQLite would go on
  writing into the deleted file, and everything written would vanish at the next
  restart): noticed on the next write, or within :data:`CHECK_EVERY` seconds on reads,
  by comparing the database file's inode with the one opened; logged, and the store
  is reopened, which recreates the directory 0700;
- **disk full**: the handle is kept and ``on_full`` is called (the service evicts from
  the audio store to make room); an open that fails on a full disk releases the
  cache's :class:`lib.cache.diskutil.Reserve` and tries again;
- anything else (read-only, missing, busy): reported, the handle is dropped, and the
  store is reopened after a back-off of :data:`REOPEN_AFTER` seconds.

Errors are logged rate-limited per cause and counted through ``on_error``.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager, suppress
from pathlib import Path
from typing import Any

import diskcache

from lib.cache.diskutil import (
    DB_NAME,
    Reserve,
    db_identity,
    free_bytes,
    is_damage,
    is_full,
    open_cache,
    quarantine,
    remove_values_before,
)
from lib.core.ratelimit import LogLimiter
from lib.core.reports import StoreState

__all__ = ["CHECK_EVERY", "REOPEN_AFTER", "STORE_ERRORS", "DiskHandle"]

_LOGGER = logging.getLogger(__name__)
_LIMITED = LogLimiter(_LOGGER, every=60.0)

#: What a store may raise that means "the store failed", not "the code is wrong".
STORE_ERRORS: tuple[type[BaseException], ...] = (sqlite3.Error, OSError, diskcache.Timeout)
REOPEN_AFTER = 5.0
"""Seconds between attempts to reopen a failed store."""
_HEX = frozenset("0123456789abcdef")
CHECK_EVERY = 1.0
"""Seconds between checks, on reads, that the store's directory is still the one
opened (every write checks)."""


class DiskHandle:
    """One private diskcache at ``directory``, opened on first use and reopened after
    a failure. Thread-safe.

    ``disposable`` stores hold only what can be made again (audio, voice profiles):
    when their database is damaged, the value files it referred to are deleted too.
    """

    def __init__(
        self,
        directory: Path,
        *,
        name: str,
        on_error: Callable[[str, BaseException], None] = lambda op, exc: None,
        on_full: Callable[[], None] | None = None,
        reserve: Reserve | None = None,
        disposable: bool = False,
        **settings: Any,
    ) -> None:
        self.directory = Path(directory)
        self.name = name
        self._settings = settings
        self._on_error = on_error
        self.on_full = on_full
        self.reserve = reserve
        self._disposable = disposable
        self._cache: diskcache.Cache | None = None
        self._identity: tuple[int, int] | None = None
        self._opened: weakref.WeakKeyDictionary[diskcache.Cache, tuple[int, int] | None] = weakref.WeakKeyDictionary()
        """The database file each cache object opened: a late error from an old one
        must never move aside the fresh file that replaced it."""
        self._next_open = 0.0
        self._next_check = 0.0
        self._lock = threading.Lock()
        self.last_error: str | None = None
        self.repairs: deque[str] = deque(maxlen=20)
        """What was repaired (damaged databases moved aside), newest last."""

    # -- opening ------------------------------------------------------------------------

    def open(self, *, write: bool = False) -> diskcache.Cache | None:
        """The open cache, or None while it cannot be opened (retried after a back-off).
        ``write``: the caller is about to write, so check first that the directory is
        still the one opened (reads check every :data:`CHECK_EVERY` seconds)."""
        cache = self._cache
        if cache is not None:  # not ``self._cache or``: an empty Cache is falsy
            now = time.monotonic()
            if not write and now < self._next_check:
                return cache
            self._next_check = now + CHECK_EVERY
            if db_identity(self.directory) == self._identity:
                return cache
            self._lost(cache)
        with self._lock:
            if self._cache is not None:
                return self._cache
            now = time.monotonic()
            if now < self._next_open:
                return None
            return self._open_locked(now)

    def _open_locked(self, now: float) -> diskcache.Cache | None:
        for attempt in range(3):
            before = db_identity(self.directory)
            try:
                cache = open_cache(self.directory, **self._settings)
            except STORE_ERRORS as exc:
                if attempt < 2 and is_damage(exc) and db_identity(self.directory) == before:
                    self._moved_aside(exc, "open")
                    continue
                if attempt < 2 and self._looks_full(exc) and self.reserve is not None and self.reserve.release():
                    continue
                self._next_open = now + REOPEN_AFTER
                self._report("open", exc)
                return None
            break
        self._identity = db_identity(self.directory)
        self._opened[cache] = self._identity
        self._next_check = time.monotonic() + CHECK_EVERY
        self._cache = cache
        if self.last_error:
            # Opening proves only that SQLite works: "available again" waits for a
            # value file to be written (a store whose value folders are unwritable
            # opens fine and then silently stores nothing).
            self._recheck(cache, "available")
        return cache

    def _looks_full(self, exc: BaseException) -> bool:
        small = self.reserve.size if self.reserve is not None else 64 * 1024
        return is_full(exc) or free_bytes(self.directory) < small

    # -- using --------------------------------------------------------------------------

    @contextmanager
    def using(self, op: str, *, write: bool = False) -> Iterator[diskcache.Cache | None]:
        """``with handle.using("get") as cache:`` -- ``cache`` is None while the store
        is unavailable; a store error inside the block is handled (see the module
        docstring), not raised. A write that completes clears the last error."""
        cache = self.open(write=write)
        try:
            yield cache
        except STORE_ERRORS as exc:
            self.failed(op, exc, cache)
        else:
            if write and cache is not None and self.last_error is not None:
                self._recheck(cache, "writable")  # not every write makes a value file: probe one

    def failed(self, op: str, exc: BaseException, cache: diskcache.Cache | None = None) -> None:
        """Handle a store error raised by ``op`` on ``cache`` (the module docstring
        says how, per fault)."""
        if is_damage(exc):
            self._damaged(op, exc, cache)
        elif is_full(exc):
            self._report(op, exc)  # keep the handle: eviction frees space
            if self.on_full is not None:
                self.on_full()
        elif _is_busy(exc):
            self._report(op, exc)  # another writer held the database too long: nothing is broken
        else:
            self.broken(op, exc, cache)

    def broken(self, op: str, exc: BaseException, cache: diskcache.Cache | None = None) -> None:
        """Report ``exc``, and drop the handle (``cache``, if given, the one that failed)
        so that a later call reopens the store."""
        if is_damage(exc):
            self._damaged(op, exc, cache if cache is not None else self._cache)
            return
        self._report(op, exc)
        with self._lock:
            if cache is not None and self._cache is not cache:
                return  # an old handle failed; the current one is another
            dropped, self._cache = self._cache, None
            self._next_open = time.monotonic() + REOPEN_AFTER
        _close(dropped)

    # -- faults -------------------------------------------------------------------------

    def _lost(self, cache: diskcache.Cache) -> None:
        """The directory or database was deleted or replaced: reopen on the path."""
        with self._lock:
            if self._cache is not cache:
                return  # another thread noticed first
            self._cache = None
            self._next_open = 0.0
        _close(cache)
        self.last_error = "the store's directory was deleted or replaced; recreating it"
        self._on_error("lost", FileNotFoundError(str(self.directory)))
        _LOGGER.error(
            "%s store: %s was deleted or replaced while in use; reopening it (entries written since are lost)",
            self.name, self.directory,
        )  # fmt: skip

    def _damaged(self, op: str, exc: BaseException, cache: diskcache.Cache | None) -> None:
        with self._lock:
            if cache is None:
                cache = self._cache
            opened = self._opened.get(cache) if cache is not None else None
            if cache is not None and self._cache is cache:
                self._cache = None
                self._next_open = 0.0
            elif self._cache is not None:
                return  # an old handle failed: the store was already reopened
            if opened is not None and db_identity(self.directory) == opened:
                self._moved_aside(exc, op)  # only the very file that failed, never a fresh one
        _close(cache)
        self._on_error(op, exc)
        self.open()

    def _moved_aside(self, exc: BaseException, op: str) -> None:
        """Move the damaged database aside (lock held) and say so."""
        moved_at = time.time()
        target = quarantine(self.directory)
        if target is None:
            return
        freed = remove_values_before(self.directory, moved_at) if self._disposable else 0
        message = (
            f"{self.name} store database {self.directory / 'cache.db'} is damaged ({type(exc).__name__}: {exc}, "
            f"on {op}); moved it aside to {target.name} and opened a fresh store"
        )
        if freed:
            message += f" ({freed} bytes of values it referred to removed)"
        self.repairs.append(message)
        _LOGGER.error("%s", message)

    def verify_database(self) -> None:
        """Run SQLite's ``quick_check`` on the database; a damaged one is moved aside
        and a fresh store opened (recorded in :attr:`repairs`). Reads every page of the
        database file (not the value files): for ``verify``, not for requests."""
        cache = self.open(write=True)
        if cache is None:
            return
        try:
            with closing(sqlite3.connect(str(self.directory / DB_NAME), timeout=5.0)) as con:
                rows = con.execute("PRAGMA quick_check").fetchall()
        except sqlite3.DatabaseError as exc:
            if is_damage(exc):
                self._damaged("verify", exc, cache)
            return
        if rows != [("ok",)]:
            found = "; ".join(str(row[0]) for row in rows[:3])
            self._damaged("verify", sqlite3.DatabaseError(f"quick_check found: {found}"), cache)

    @property
    def available(self) -> bool:
        return self.open() is not None

    def status(self) -> StoreState:
        """Whether the store is open and can write now -- its database *and* its value
        folders (checks the directory, reopens if a reopen is due, and writes a probe
        value file): for ``/healthz``."""
        cache = self.open(write=True)
        if cache is not None:
            problem = self.probe(cache)
            if problem is not None:
                if problem != self.last_error:
                    self._report("probe", OSError(problem))
                self.last_error = problem
            elif self.last_error is not None:
                self._recheck(cache, "available")
        return {"available": cache is not None, "error": self.last_error, "dir": str(self.directory)}

    def probe(self, cache: diskcache.Cache) -> str | None:
        """Why value files cannot be written now, or None. Every value folder
        diskcache has made (``ab/`` of ``ab/cd/<name>.val``) must be a folder we may
        write in, and a probe file is written and removed where diskcache would put the
        next value (a random folder, made 0700 as values are)."""
        try:
            with os.scandir(self.directory) as entries:
                for entry in entries:
                    if len(entry.name) == 2 and all(c in _HEX for c in entry.name):
                        folder = entry.is_dir(follow_symlinks=False)
                        if not folder or not os.access(entry.path, os.W_OK | os.X_OK):
                            what = "not a folder" if not folder else "not writable"
                            return f"value folder {entry.path} is {what}: values cannot be stored"
            _, full_path = cache.disk.filename()
            probe = full_path[: -len(".val")] + ".probe"
            cache.disk._write(probe, iter([b"probe"]), "wb")
            os.unlink(probe)
        except OSError as exc:
            return f"cannot write value files in {self.directory} ({type(exc).__name__}: {exc.strerror or exc})"
        return None

    def _recheck(self, cache: diskcache.Cache, state: str) -> None:
        """After a failure: clear the error, and say the store is ``state`` again, only
        once a probe value file was written."""
        problem = self.probe(cache)
        if problem is not None:
            self.last_error = problem
            return
        _LOGGER.warning("%s store at %s is %s again (a value file was written)", self.name, self.directory, state)
        self.last_error = None

    def close(self) -> None:
        with self._lock:
            cache, self._cache = self._cache, None
        _close(cache)

    def _cause(self, op: str) -> str:
        return f"{self.name}:{op}"

    def _report(self, op: str, exc: BaseException) -> None:
        message = f"{op}: {type(exc).__name__}: {exc}"
        _LIMITED.log(
            logging.ERROR, f"{self._cause(op)}:{type(exc).__name__}:{exc}",
            "%s store %s failed (%s); serving without it", self.name, self.directory, message,
        )  # fmt: skip
        self.last_error = message
        self._on_error(op, exc)


def _is_busy(exc: BaseException) -> bool:
    return isinstance(exc, diskcache.Timeout) or (
        isinstance(exc, sqlite3.OperationalError) and "database is locked" in str(exc)
    )


def _close(cache: diskcache.Cache | None) -> None:
    if cache is not None:
        with suppress(*STORE_ERRORS):
            cache.close()
