"""Background writes of new entries, so that a miss returns as soon as the audio is
ready: FLAC encoding and the disk write (about 2 ms for a 5 s clip) happen after the
caller has its answer. The memory tier is filled before returning, and the
single-flight lease is held until the write is done, so no request, in this process
or another, runs the engine again in the meantime."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

__all__ = ["Writer"]

_LOGGER = logging.getLogger(__name__)


class Writer:
    """One daemon thread running submitted jobs in order."""

    def __init__(self) -> None:
        self._jobs: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="cache-writer", daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], None]) -> None:
        self._jobs.put(job)

    def flush(self) -> None:
        """Wait until every job submitted so far has run."""
        self._jobs.join()

    def close(self) -> None:
        self._jobs.put(None)
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                job()
            except Exception:  # a failed write must not stop later ones
                _LOGGER.exception("background cache write failed")
            finally:
                self._jobs.task_done()
