"""Evictions across replicas that share only the object store (with Redis, its stream
does this: lib.shared.evictions).

The replica that evicts a tag or clears appends an event object,
``<prefix>/e/<unix ms>-<sender>`` (JSON ``{"tag": ..., "all": ...}``), after removing the
objects. Every other replica lists ``e/`` every ``poll_every`` seconds from the last
event it applied and removes its local copies, so evicted entries are not served from
another replica's disk. Names sort by time, so a poll lists only the new events, plus
a window of ``_SKEW`` before the last one: an event written by a replica whose clock is
behind still arrives (events are remembered by name, so none is applied twice).

Where a replica got to is kept in ``state_file``, so one that was stopped applies what it
missed on start; if it was away longer than events are kept (``RETENTION``: the tier's
sweep deletes older events), it clears its local tiers: they are a cache, and the
object store and the engine still have everything.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lib.cache.breaker import Breaker
from lib.objects.client import ObjectClient
from lib.objects.layout import Layout

__all__ = ["RETENTION", "ObjectFeed"]

_LOGGER = logging.getLogger(__name__)

RETENTION = 7 * 86400.0
"""Seconds an event is kept (the tier's sweep deletes older ones)."""
_SKEW = 300_000  # ms of clock difference between replicas tolerated

Apply = Callable[[str | None], None]


def _ms(name: str) -> int:
    stem = name.rsplit("/", 1)[-1].split("-", 1)[0]
    return int(stem) if stem.isdigit() else 0


class ObjectFeed:
    """The evictions of one prefix, announced and followed."""

    def __init__(
        self, client: ObjectClient, layout: Layout, breaker: Breaker, *, where: str, poll_every: float = 5.0
    ) -> None:
        self.client = client
        self.layout = layout
        self.breaker = breaker
        self.sender = uuid.uuid4().hex[:12]
        self._where = where
        self._poll_every = poll_every
        self._apply: Apply | None = None
        self._state_file: Path | None = None
        self._last = 0
        """Time (ms, writer's clock) of the newest event applied or skipped."""
        self._seen: set[str] = set()
        self._fresh = False
        """First start with this store: events already there are history, not news."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def announce(self, tag: str | None) -> bool:
        """Tell the other replicas to drop their copies of ``tag`` (None: everything)."""
        name = f"{self.layout.events_dir()}{int(time.time() * 1000):013d}-{self.sender}"
        body = json.dumps({"tag": tag or "", "all": tag is None}).encode()
        return self.breaker.call("announce eviction", lambda: self.client.put(name, body) is not None, False)

    def follow(self, apply: Apply, state_file: Path | None) -> None:
        """Apply other replicas' evictions with ``apply`` from now on (and those missed
        since ``state_file`` was written), polling in a thread."""
        self._apply, self._state_file = apply, state_file
        self._load()
        self._thread = threading.Thread(target=self._loop, name="object-evictions", daemon=True)
        self._thread.start()

    def poll(self) -> int:
        """Apply the events not applied yet; how many (tests call it directly)."""
        with self._lock:
            return int(self.breaker.call("read evictions", self._poll, 0) or 0)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    # -- internals --------------------------------------------------------------------------

    def _loop(self) -> None:
        self.poll()
        while not self._stop.wait(self._poll_every):
            self.poll()

    def _poll(self) -> int:
        apply = self._apply
        if apply is None:
            return 0
        applied = 0
        now = int(time.time() * 1000)
        if self._last and self._last < now - RETENTION * 1000:
            _LOGGER.warning(
                "object store %s: this replica was away longer than evictions are kept; clearing its local tiers",
                self._where,
            )
            apply(None)
            applied += 1
            self._last = now
        start = f"{self.layout.events_dir()}{max(0, self._last - _SKEW):013d}"
        newest = self._last
        for item in self.client.list(self.layout.events_dir(), start_after=start):
            if item.name in self._seen:
                continue
            self._seen.add(item.name)
            newest = max(newest, _ms(item.name))
            if self._fresh or item.name.endswith("-" + self.sender):
                continue  # history, or ours (applied before it was announced)
            got = self.client.get(item.name)
            event: Any = json.loads(got.body) if got is not None else None
            if not isinstance(event, dict):
                continue
            apply(None if event.get("all") else str(event.get("tag") or ""))
            applied += 1
        self._last, self._fresh = newest, False
        self._seen = {n for n in self._seen if _ms(n) >= newest - 2 * _SKEW}
        self._save()
        return applied

    def _load(self) -> None:
        state: Any = None
        if self._state_file is not None:
            with contextlib.suppress(OSError, ValueError):
                state = json.loads(self._state_file.read_text(encoding="utf-8"))
        if isinstance(state, dict) and state.get("where") == self._where and isinstance(state.get("last"), int):
            self._last = state["last"]
            self._seen = {str(n) for n in state.get("seen") or []}
        else:  # first start with this store: nothing to catch up on
            self._last, self._fresh = int(time.time() * 1000), True

    def _save(self) -> None:
        if self._state_file is None:
            return
        data = json.dumps({"where": self._where, "last": self._last, "seen": sorted(self._seen)}).encode()
        with contextlib.suppress(OSError):  # at worst, a restart replays a few evictions
            fd, tmp = tempfile.mkstemp(prefix=".evictions-", dir=self._state_file.parent)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                os.replace(tmp, self._state_file)
            except OSError:
                os.unlink(tmp)
                raise
