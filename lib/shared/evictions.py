"""Evictions across replicas: removing a tag's entries from Redis, and telling every
replica to remove its local copies.

Redis does not know an entry's tag, so :func:`evict_tag` scans the audio keys and
reads only the start of each value (the entry's JSON header: ``tag`` and ``voice``),
never the audio. An admin action, not a request path: O(entries), batched.

:class:`EvictionFeed` is a Redis stream (``<namespace>evictions``) of evictions and
clears. The replica that evicts appends one event after removing its own and Redis's
copies; every other replica reads the stream (every ``poll_every`` seconds, from the
last event it applied) and removes its local copies (memory and disk), so evicted
entries come back from nowhere. The last applied event is kept in ``state_file``, so a
replica that was stopped applies on start what it missed; if the stream was trimmed
past it (Redis 7 counts the events ever added), the replica clears its local tiers
(they are a cache: Redis and the engine still have everything).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from lib.cache.entry import CorruptEntryError, matches_tag, read_header
from lib.shared.breaker import Breaker
from lib.shared.codec import as_text

__all__ = ["EvictionFeed", "evict_tag"]

_LOGGER = logging.getLogger(__name__)

_BATCH = 200
_PEEK = 4096  # bytes of each value read first; a longer header is read whole
_HEAD = 8  # magic + u32 header length (lib.cache.entry)
_KEEP_EVENTS = 10_000
_READ_MAX = 4 * _KEEP_EVENTS  # all of them: the stream is trimmed approximately

Apply = Callable[[str | None], None]
"""Remove local copies of a tag's entries (None: of every entry)."""


def evict_tag(client: redis.Redis, prefix: str, tag: str) -> int:
    """Unlink every entry under ``prefix`` whose header matches ``tag``
    (``engine:model_version`` or ``voice:<id>``); return how many."""
    removed = 0
    batch: list[bytes] = []

    def flush() -> int:
        pipe = client.pipeline(transaction=False)
        for name in batch:
            pipe.getrange(name, 0, _PEEK - 1)
        heads = pipe.execute()
        doomed = [name for name, head in zip(batch, heads, strict=True) if _matches(client, name, head, tag)]
        return int(client.unlink(*doomed)) if doomed else 0

    for name in client.scan_iter(match=_escape_glob(prefix) + "*", count=500):
        batch.append(name)
        if len(batch) >= _BATCH:
            removed += flush()
            batch = []
    if batch:
        removed += flush()
    return removed


def _matches(client: redis.Redis, name: bytes, head: Any, tag: str) -> bool:
    blob = bytes(head or b"")
    if len(blob) >= _HEAD:
        size = int.from_bytes(blob[4:8], "little")
        if _HEAD + size > len(blob):  # a long header (a long text): read exactly it
            more: Any = client.getrange(name, 0, _HEAD + size - 1)
            blob = bytes(more or b"")
    try:
        return matches_tag(read_header(blob), tag)
    except CorruptEntryError:
        return False


class EvictionFeed:
    """The stream of evictions shared by the replicas of one namespace."""

    def __init__(
        self,
        client: redis.Redis,
        breaker: Breaker,
        namespace: str,
        replica: str,
        *,
        where: str,
        poll_every: float = 1.0,
    ) -> None:
        self.client = client
        self.breaker = breaker
        self.key = namespace + "evictions"
        self.replica = replica
        self.sender = f"{replica}/{uuid.uuid4().hex[:12]}"
        """This feed's own id (two services in one process share a replica id)."""
        self._where = where
        self._poll_every = poll_every
        self._apply: Apply | None = None
        self._state_file: Path | None = None
        self._last: str | None = None
        """The id of the last event applied; None until the first read."""
        self._seen = 0
        """How many events the stream had had when it was last read (``entries-added``)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def announce(self, tag: str | None) -> bool:
        """Tell the other replicas to drop their copies of ``tag`` (None: everything)."""
        fields: dict[Any, Any] = {"tag": tag or "", "all": "1" if tag is None else "0", "by": self.sender}
        return bool(
            self.breaker.call(
                "announce eviction",
                lambda: self.client.xadd(self.key, fields, maxlen=_KEEP_EVENTS, approximate=True),
                None,
            )
        )

    def follow(self, apply: Apply, state_file: Path | None) -> None:
        """Apply other replicas' evictions with ``apply`` from now on (and those missed
        since the event recorded in ``state_file``), polling in a thread."""
        self._apply, self._state_file = apply, state_file
        self._last, self._seen = self._load_state()
        self._thread = threading.Thread(target=self._loop, name="shared-evictions", daemon=True)
        self._thread.start()

    def poll(self) -> int:
        """Apply the events not applied yet; return how many (tests call it directly)."""
        with self._lock:
            applied = self.breaker.call("read evictions", self._poll, None)
            return int(applied or 0)

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
        pipe = self.client.pipeline(transaction=True)  # one snapshot: the count and the events agree
        pipe.xinfo_stream(self.key)
        pipe.xrange(self.key, min=f"({self._last}" if self._last else "-", max="+", count=_READ_MAX)
        info, events = pipe.execute(raise_on_error=False)
        if isinstance(info, redis.ResponseError):  # no stream yet: nothing was ever evicted
            if self._last is None:
                self._save("0-0", 0)
            return 0
        for answer in (info, events):
            if isinstance(answer, Exception):
                raise answer
        added = int(info.get("entries-added") or 0)  # every event ever appended (Redis 7+)
        if self._last is None:  # first start with this Redis: nothing to catch up on
            self._save(_text(info.get("last-generated-id")) or "0-0", added)
            return 0
        applied = 0
        expected = added - self._seen
        if expected >= 0 and len(events) < expected:  # Redis 6 has no count: added stays 0
            _LOGGER.warning(
                "shared tier %s: %d evictions were trimmed before this replica read them; clearing its local tiers",
                self._where, expected - len(events),
            )  # fmt: skip
            apply(None)
            applied += 1
        last = self._last
        for event_id, fields in events:
            last = _text(event_id)
            values = {_text(k): _text(v) for k, v in fields.items()}
            if values.get("by") == self.sender:
                continue  # applied before it was announced
            apply(None if values.get("all") == "1" else values.get("tag", ""))
            applied += 1
        if last != self._last or added != self._seen:
            self._save(last, added)
        return applied

    def _load_state(self) -> tuple[str | None, int]:
        if self._state_file is None:
            return None, 0
        try:
            state = json.loads(self._state_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None, 0
        if not isinstance(state, dict) or state.get("stream") != self._stream_id():
            return None, 0  # another Redis or namespace: its events are not ours
        last, seen = state.get("last"), state.get("seen", 0)
        if not isinstance(last, str) or not _valid(last) or not isinstance(seen, int):
            return None, 0
        return last, seen

    def _save(self, last: str, seen: int) -> None:
        self._last, self._seen = last, seen
        if self._state_file is None:
            return
        data = json.dumps({"stream": self._stream_id(), "last": last, "seen": seen}).encode()
        with contextlib.suppress(OSError):  # at worst, a restart replays a few evictions
            fd, tmp = tempfile.mkstemp(prefix=".evictions-", dir=self._state_file.parent)
            try:
                with os.fdopen(fd, "wb") as fh:
                    fh.write(data)
                os.replace(tmp, self._state_file)
            except OSError:
                os.unlink(tmp)
                raise

    def _stream_id(self) -> str:
        return f"{self._where} {self.key}"


def _text(value: Any) -> str:
    return "" if value is None else as_text(value)


def _parse(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _valid(entry_id: str) -> bool:
    try:
        _parse(entry_id)
    except ValueError:
        return False
    return True


def _escape_glob(text: str) -> str:
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
