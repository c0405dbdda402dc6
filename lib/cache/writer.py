"""Background writes of new entries, so that a miss returns as soon as the audio is
ready: FLAC encoding and the disk write (about 2 ms for a 5 s clip) happen after the
caller has its answer. The memory tier is filled before the job is submitted, and
:class:`lib.cache.production.Production` holds the key's single-flight lease until the
job has run, so no request, in this process or another, runs the engine again in the
meantime. Jobs run in the order submitted."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

__all__ = ["Writer", "WriterClosedError"]

_LOGGER = logging.getLogger(__name__)


class WriterClosedError(RuntimeError):
    """A job was submitted after :meth:`Writer.close`."""


class Writer:
    """One thread running submitted jobs in order.

    :meth:`flush` is a barrier: it waits for the jobs submitted *before* it, not for
    jobs that other threads keep submitting meanwhile, so it always ends. After
    :meth:`close`, :meth:`submit` fails at once and :meth:`flush` returns at once.
    """

    def __init__(self) -> None:
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._closed = False
        self._guard = threading.Lock()
        self._thread = threading.Thread(target=self._loop, name="cache-writer", daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], None]) -> None:
        with self._guard:
            if self._closed:
                raise WriterClosedError("the cache writer is closed; the service is shutting down")
            self._jobs.put(job)

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Wait until every job submitted before this call has run. True if it did
        within ``timeout`` seconds."""
        done = threading.Event()
        with self._guard:
            if self._closed or not self._thread.is_alive():
                return True
            self._jobs.put(done.set)
        return done.wait(timeout)

    def close(self, timeout: float = 30.0) -> None:
        """Run the jobs already submitted, then stop the thread and join it."""
        with self._guard:
            if self._closed:
                return
            self._closed = True
            self._jobs.put(None)
        self._thread.join(timeout=timeout)
        if self._thread.is_alive():
            _LOGGER.error("the cache writer did not finish within %.0f s; pending writes are lost", timeout)

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                job()
            except Exception:  # a failed write must not stop later ones
                _LOGGER.exception("background cache write failed")
