"""Refining composed answers in the background (templates with ``"refine": true``).

A composed answer is fast but its prosody is stitched; the whole sentence synthesised
in one go sounds natural. After a composed answer the service queues the request here;
one worker thread synthesises it through the normal miss path (so it is stored under
the sentence's own key, single-flight like any miss) and the next request for the same
sentence is a plain hit. One worker, so refining never takes more than one engine at a
time from the requests that are waiting; a bounded queue, so a burst of ticket calls
cannot pile up work: beyond it, requests are simply not refined (counted).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from lib.core.logtext import cut_text
from lib.errors import TTSError
from lib.request.types import Resolved

__all__ = ["Refiner"]

_LOGGER = logging.getLogger(__name__)


class Refiner:
    """Runs ``make(resolved)`` for queued requests, once per key at a time."""

    def __init__(
        self, make: Callable[[Resolved], object], *, limit: int = 64, on_event: Callable[[str], None] = lambda e: None
    ) -> None:
        self._make = make
        self._queue: queue.Queue[Resolved | None] = queue.Queue(maxsize=limit)
        self._queued: set[str] = set()
        self._lock = threading.Lock()
        self._on_event = on_event
        self._thread: threading.Thread | None = None
        self._closed = False

    def submit(self, r: Resolved) -> bool:
        """Queue ``r``; False when it is queued already, or the queue is full or closed."""
        with self._lock:
            if self._closed or r.key in self._queued:
                return False
            try:
                self._queue.put_nowait(r)
            except queue.Full:
                self._on_event("dropped")
                return False
            self._queued.add(r.key)
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="template-refine", daemon=True)
                self._thread.start()
        return True

    def _loop(self) -> None:
        while True:
            r = self._queue.get()
            if r is None:
                return
            try:
                self._make(r)
                self._on_event("done")
            except TTSError as exc:
                self._on_event("failed")
                _LOGGER.info("refining %r failed: %s", cut_text(r.fields.text), exc)
            except Exception:
                self._on_event("failed")
                _LOGGER.exception("refining %r failed", cut_text(r.fields.text))
            finally:
                with self._lock:
                    self._queued.discard(r.key)

    def pending(self) -> int:
        with self._lock:
            return len(self._queued)

    def wait(self, timeout: float = 60.0) -> bool:
        """Wait until nothing is queued or running (tests, benchmarks)."""
        deadline = time.monotonic() + timeout
        while self.pending():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.01)
        return True

    def close(self, timeout: float = 60.0) -> None:
        """Drop what is queued, let the running one end, stop the worker."""
        with self._lock:
            self._closed = True
            thread = self._thread
        while True:
            try:
                dropped = self._queue.get_nowait()
            except queue.Empty:
                break
            if dropped is not None:
                with self._lock:
                    self._queued.discard(dropped.key)
        if thread is not None:
            self._queue.put(None)
            thread.join(timeout)
