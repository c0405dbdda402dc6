"""Private on-disk caches: every directory 0700, every file 0600.

Cached audio and voice recordings are personal data of the service's users, so they
are created private, not chmod-ed afterwards (no window in which they are readable).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import diskcache

__all__ = ["PrivateDisk", "ensure_private_dir", "open_cache"]

DIR_MODE = 0o700
FILE_MODE = 0o600


def ensure_private_dir(path: str | os.PathLike[str]) -> Path:
    """Create ``path`` (and parents) if needed, and make it 0700."""
    p = Path(path)
    p.mkdir(mode=DIR_MODE, parents=True, exist_ok=True)
    if (p.stat().st_mode & 0o777) != DIR_MODE:
        os.chmod(p, DIR_MODE)
    return p


class PrivateDisk(diskcache.Disk):  # type: ignore[misc]
    """diskcache's Disk, but value files are created 0600 in 0700 directories."""

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
            with open(fd, "wb" if "b" in mode else "w", encoding=encoding) as writer:
                size = 0
                for chunk in iterator:
                    size += len(chunk)
                    writer.write(chunk)
                return size
        raise OSError(f"cannot write {full_path}")  # pragma: no cover - loop always returns or raises


def _makedirs_private(path: str) -> None:
    # os.makedirs applies ``mode`` to the leaf only; diskcache makes two levels.
    parent = os.path.dirname(path)
    if parent and not os.path.isdir(parent):
        _makedirs_private(parent)
    with contextlib.suppress(OSError):
        os.mkdir(path, DIR_MODE)


def open_cache(directory: str | os.PathLike[str], **settings: Any) -> diskcache.Cache:
    """Open (creating if needed) a private diskcache at ``directory``."""
    path = ensure_private_dir(directory)
    settings.setdefault("timeout", 5.0)
    cache = diskcache.Cache(str(path), disk=PrivateDisk, **settings)
    for name in _db_files(path):
        with contextlib.suppress(OSError):
            if (name.stat().st_mode & 0o777) != FILE_MODE:
                os.chmod(name, FILE_MODE)
    return cache


def _db_files(path: Path) -> Iterator[Path]:
    for suffix in ("", "-wal", "-shm"):
        candidate = path / f"cache.db{suffix}"
        if candidate.exists():
            yield candidate
