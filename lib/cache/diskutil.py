"""Private on-disk caches, and the disk faults they must survive.

Every directory is 0700, every file 0600: cached audio and voice recordings are personal
data of the service's users, so they are created private, not chmod-ed afterwards (no
window in which they are readable).

SQLite is opened with memory-mapped I/O off (``sqlite_mmap_size=0``): with mmap, a
database file truncated under a running process (a full disk, a careless cleanup)
kills the process with SIGBUS on the next read; without it, the read is an error that
:mod:`lib.cache.handle` turns into "move the damaged file aside, open a fresh store".

A full disk is survived with a small *reserve*: a file of a few hundred KiB kept at the
cache root. SQLite cannot even open (it needs its ``-shm`` and ``-wal`` files) or delete
rows (deletes are written to the WAL first) on a disk with no byte free, so when the
disk is full the reserve is deleted to give SQLite room to open and evict, and is
written again once eviction has made space.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import diskcache

__all__ = [
    "DB_NAME",
    "PrivateDisk",
    "Reserve",
    "db_identity",
    "disk_bytes",
    "ensure_private_dir",
    "extra_files_bytes",
    "free_bytes",
    "is_damage",
    "is_full",
    "open_cache",
    "quarantine",
    "remove_values_before",
    "wal_settings",
]

_LOGGER = logging.getLogger(__name__)

DIR_MODE = 0o700
FILE_MODE = 0o600
DB_NAME = "cache.db"
DAMAGED = DB_NAME + ".damaged-"
PAGE = 4096  # SQLite's page size as diskcache creates its databases


def ensure_private_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` if needed, and make it 0700. Missing parents are created 0700
    too: when the whole cache directory was deleted under a running service, every
    level is ours to recreate, and none of it may be readable by others."""
    p = Path(path)
    missing: list[Path] = []
    probe = p
    while not probe.exists() and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for level in reversed(missing):
        with contextlib.suppress(FileExistsError):
            level.mkdir(mode=DIR_MODE)
    if (p.stat().st_mode & 0o777) != DIR_MODE:
        os.chmod(p, DIR_MODE)
    return p


class PrivateDisk(diskcache.Disk):  # type: ignore[misc]
    """diskcache's Disk, but value files are created 0600 in 0700 directories, and a
    write that fails half-way (a full disk) leaves no partial file behind."""

    def _write(self, full_path: str, iterator: Iterable[Any], mode: str, encoding: str | None = None) -> int:
        full_dir = os.path.dirname(full_path)
        for attempt in range(1, 11):
            _makedirs_private(full_dir)
            try:
                fd = os.open(full_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
            except FileExistsError:
                raise
            except OSError:
                # Another process may have removed the directory before the open.
                if attempt == 10:
                    raise
                continue
            try:
                with open(fd, "wb" if "b" in mode else "w", encoding=encoding) as writer:
                    size = 0
                    for chunk in iterator:
                        size += len(chunk)
                        writer.write(chunk)
                    return size
            except BaseException:
                # diskcache would leave the partial file: on a full disk it holds the
                # very space the next attempt needs, and nothing ever refers to it.
                with contextlib.suppress(OSError):
                    os.unlink(full_path)
                raise
        raise OSError(f"cannot write {full_path}")  # pragma: no cover - loop always returns or raises


def _makedirs_private(path: str) -> None:
    # os.makedirs applies ``mode`` to the leaf only; diskcache makes two levels.
    if os.path.isdir(path):
        return  # the common case; a failing mkdir costs a millisecond on overlay filesystems
    parent = os.path.dirname(path)
    if parent and not os.path.isdir(parent):
        _makedirs_private(parent)
    with contextlib.suppress(OSError):
        os.mkdir(path, DIR_MODE)


def wal_settings(wal_bytes: int) -> dict[str, int]:
    """diskcache settings that bound a store's write-ahead log to about ``wal_bytes``:
    SQLite checkpoints after that many bytes of pages and truncates the log back to
    that size after each checkpoint (its default, 1,000 pages, lets a 2 MiB cache
    carry a 4 MiB log)."""
    return {
        "sqlite_wal_autocheckpoint": max(16, wal_bytes // PAGE),
        "sqlite_journal_size_limit": wal_bytes,
    }


def open_cache(directory: str | os.PathLike[str], **settings: Any) -> diskcache.Cache:
    """Open (creating if needed) a private diskcache at ``directory``, with SQLite's
    memory-mapped I/O off."""
    path = ensure_private_dir(directory)
    settings.setdefault("timeout", 5.0)
    settings["sqlite_mmap_size"] = 0
    cache = diskcache.Cache(str(path), disk=PrivateDisk, **settings)
    for name in _db_files(path):
        with contextlib.suppress(OSError):
            if (name.stat().st_mode & 0o777) != FILE_MODE:
                os.chmod(name, FILE_MODE)
    return cache


def _db_files(path: Path) -> Iterator[Path]:
    for suffix in ("", "-wal", "-shm"):
        candidate = path / f"{DB_NAME}{suffix}"
        if candidate.exists():
            yield candidate


def db_identity(directory: Path) -> tuple[int, int] | None:
    """(device, inode) of the store's database file, None if it is not there. A store
    whose directory was deleted, replaced or moved has a different identity (or none)."""
    try:
        st = os.stat(directory / DB_NAME)
    except OSError:
        return None
    return st.st_dev, st.st_ino


# -- faults ---------------------------------------------------------------------------------


def is_damage(exc: BaseException) -> bool:
    """Whether ``exc`` says the database file itself is damaged (truncated, overwritten,
    not a database), as opposed to busy, read-only, missing or full."""
    if not isinstance(exc, sqlite3.DatabaseError) or isinstance(exc, sqlite3.OperationalError):
        return False
    name = getattr(exc, "sqlite_errorname", "") or ""
    text = str(exc).lower()
    return name in ("SQLITE_CORRUPT", "SQLITE_NOTADB") or "malformed" in text or "not a database" in text


def is_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk (or the user's quota) is full."""
    if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    if isinstance(exc, sqlite3.Error):
        name = getattr(exc, "sqlite_errorname", "") or ""
        return name in ("SQLITE_FULL", "SQLITE_IOERR_SHMSIZE") or "disk is full" in str(exc)
    return False


def free_bytes(path: str | os.PathLike[str]) -> int:
    """Bytes an unprivileged writer may still use on the filesystem of ``path`` (or of
    its nearest existing parent)."""
    st = _statvfs(path)
    return 0 if st is None else int(st.f_bavail * st.f_frsize)


def disk_bytes(path: str | os.PathLike[str]) -> int:
    """Size of the filesystem of ``path`` (or of its nearest existing parent)."""
    st = _statvfs(path)
    return 0 if st is None else int(st.f_blocks * st.f_frsize)


def _statvfs(path: str | os.PathLike[str]) -> os.statvfs_result | None:
    probe = Path(path)
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return os.statvfs(probe)
    except OSError:
        return None


def quarantine(directory: Path) -> Path | None:
    """Move a damaged ``cache.db`` (and its ``-wal``/``-shm``) aside as
    ``cache.db.damaged-<time>``, keeping only the newest such copy; return its path.
    diskcache's own consistency check skips files named ``cache.db*``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    target = directory / f"{DAMAGED}{stamp}"
    try:
        os.replace(directory / DB_NAME, target)
    except FileNotFoundError:
        return None
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(OSError):
            os.unlink(directory / f"{DB_NAME}{suffix}")  # they belong to the damaged file
    for old in directory.glob(DAMAGED + "*"):
        if old.name != target.name:
            with contextlib.suppress(OSError):
                old.unlink()
    with contextlib.suppress(OSError):
        os.chmod(target, FILE_MODE)
    return target


def remove_values_before(directory: Path, before: float) -> int:
    """Delete the value files (``xx/yy/*.val``) last written before ``before`` (unix
    time): after a damaged database was moved aside, nothing refers to them any more,
    while files written since belong to the fresh store. Returns bytes freed."""
    freed = 0
    for root, dirs, files in os.walk(directory, topdown=False):
        for name in files:
            if not name.endswith(".val"):
                continue
            path = os.path.join(root, name)
            with contextlib.suppress(OSError):
                st = os.stat(path)
                if st.st_mtime < before:
                    os.unlink(path)
                    freed += st.st_size
        for name in dirs:
            with contextlib.suppress(OSError):
                os.rmdir(os.path.join(root, name))  # only if empty
    return freed


def extra_files_bytes(directory: Path, wal_bound: int = 0) -> int:
    """Bytes of a store's files that diskcache's ``volume()`` does not count: the
    write-ahead log (at least ``wal_bound``: it grows to that between checkpoints),
    the shared-memory index and a damaged database kept aside."""
    total = 0
    with contextlib.suppress(OSError):
        for entry in os.scandir(directory):
            if entry.name.startswith(DB_NAME) and entry.name != DB_NAME and entry.is_file(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    size = entry.stat(follow_symlinks=False).st_size
                    total += max(size, wal_bound) if entry.name.endswith("-wal") else size
    return total


class Reserve:
    """A file of ``size`` bytes whose only purpose is to be deleted when the disk is
    full, so that SQLite has room to open a store and evict from it."""

    def __init__(self, path: Path, size: int = 512 * 1024) -> None:
        self.path = path
        self.size = size
        self._lock = threading.Lock()

    @property
    def present(self) -> bool:
        try:
            return self.path.stat().st_size >= self.size
        except OSError:
            return False

    def release(self) -> bool:
        """Delete the reserve; True if that freed space."""
        with self._lock:
            try:
                self.path.unlink()
            except OSError:
                return False
        _LOGGER.warning("disk under %s is full: released the %d KiB reserve", self.path.parent, self.size // 1024)
        return True

    def restore(self) -> bool:
        """Write the reserve again if it is missing and the disk has room for it and
        as much again; True if it is (now) present."""
        if self.present:
            return True
        with self._lock:
            if free_bytes(self.path.parent) < 2 * self.size or not self.path.parent.is_dir():
                return False
            tmp = self.path.with_name(self.path.name + ".part")
            try:
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
                try:
                    block = b"\0" * 65536
                    for _ in range(0, self.size, len(block)):
                        os.write(fd, block)  # real blocks: a sparse file would free nothing
                finally:
                    os.close(fd)
                os.replace(tmp, self.path)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                return False
        return True
