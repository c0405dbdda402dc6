"""Files handed to callers that need a path rather than bytes (the web UI's audio
player and downloads, phrase-list exports).

They live in one private directory per service, made by ``mkdtemp`` (0700, an
unpredictable name, owned by us: no other user can pre-create it or plant a symlink),
outside the cache directory so they never count against its size limit, and removed
when the service closes. Every file is written to a temporary name with mode 0600 and
renamed into place, so a reader never sees half a file; at most ``keep`` files are kept
across all kinds and formats, oldest first out.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import stat
import tempfile
import threading
from pathlib import Path

from lib.core.reports import StoreState

__all__ = ["ResultFiles"]

_LOGGER = logging.getLogger(__name__)

_SAFE_NAME = re.compile(r"[^\w.\-]+")


class ResultFiles:
    """A private, bounded directory of result and export files."""

    def __init__(self, keep: int = 256, parent: str | None = None) -> None:
        self.keep = keep
        self._parent = parent
        self._dir: Path | None = None
        self._lock = threading.Lock()
        self._written = 0

    @property
    def directory(self) -> Path:
        """The private directory, created on first use and checked on every use."""
        with self._lock:
            if self._dir is None or not _is_private_dir(self._dir):
                if self._dir is not None:
                    _LOGGER.warning("result directory %s was removed or changed; making a new one", self._dir)
                self._dir = Path(tempfile.mkdtemp(prefix="tts-results-", dir=self._parent))
            return self._dir

    def subdir(self, name: str) -> Path:
        """A private (0700) folder ``name`` inside the directory, removed with it at
        :meth:`close`; :meth:`trim` leaves folders alone (the web UI's Gradio files)."""
        path = self.directory / _SAFE_NAME.sub("_", name)
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
        if not _is_private_dir(path):
            os.chmod(path, 0o700)
            if not _is_private_dir(path):  # a symlink or someone else's: never hand it out
                raise OSError(f"{path} is not a private folder of this process")
        return path

    def status(self) -> StoreState:
        """Whether result files can be written now (for ``/healthz``); recreates the
        directory if it was removed."""
        try:
            directory = self.directory
        except OSError as exc:
            return {"available": False, "error": f"cannot create a result directory: {exc}", "dir": None}
        if not os.access(directory, os.W_OK | os.X_OK):
            return {"available": False, "error": "the result directory is not writable", "dir": str(directory)}
        return {"available": True, "error": None, "dir": str(directory)}

    def write(self, name: str, data: bytes) -> Path:
        """Write ``data`` as ``name`` (made safe) atomically, 0600; return its path."""
        safe = _SAFE_NAME.sub("_", name).strip("._") or "result"
        directory = self.directory
        target = directory / safe
        with contextlib.suppress(OSError):
            if target.stat().st_size == len(data) and target.read_bytes() == data:
                return target
        fd, tmp = tempfile.mkstemp(prefix=".part-", dir=directory)  # 0600, O_EXCL
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        with self._lock:
            self._written += 1
            trim = self._written % 16 == 0
        if trim:
            self.trim()
        return target

    def trim(self) -> int:
        """Keep the newest ``keep`` files; return how many were removed."""
        try:
            files = [p for p in self.directory.iterdir() if p.is_file() and not p.name.startswith(".part-")]
            files.sort(key=lambda p: p.stat().st_mtime_ns)
        except OSError:
            return 0
        removed = 0
        for old in files[: max(0, len(files) - self.keep)]:
            with contextlib.suppress(OSError):
                old.unlink()
                removed += 1
        return removed

    def close(self) -> None:
        """Remove the directory and everything in it."""
        with self._lock:
            directory, self._dir = self._dir, None
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


def _is_private_dir(path: Path) -> bool:
    """Still our 0700 directory: not a symlink, owned by us, nobody else may enter."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.getuid() and (st.st_mode & 0o077) == 0
