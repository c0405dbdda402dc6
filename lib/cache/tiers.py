"""The lookup chain memory -> disk -> shared (Redis) -> objects, and where new entries go.

A hit found in a lower tier is copied into the faster ones (a shared-tier or object-store
hit is verified by its key and checksum first). A new entry is put in memory at once and
written to disk, the shared tier and the object store by the writer thread; :meth:`Tiers.keep`
returns a future done once that write has finished (:mod:`lib.cache.production` releases
the key's single-flight lease then). TTL comes from the entry itself
(:meth:`CachedAudio.remaining`), so every tier expires it at the same moment.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Protocol

from lib.cache.entry import CachedAudio, CorruptEntryError, pack, unpack
from lib.cache.keys import KEY_RE
from lib.cache.lru import ByteLRU
from lib.cache.store import AudioStore
from lib.cache.writer import Writer
from lib.config import CacheConfig
from lib.config.provenance import ProvenanceConfig

__all__ = ["ObjectStore", "SharedStore", "Tiers"]

_LOGGER = logging.getLogger(__name__)


class SharedStore(Protocol):
    """What the tiers need of a shared tier: Redis (``lib.shared.SharedTier``) or an
    object store (``lib.objects.ObjectTier``)."""

    def get(self, key: str) -> bytes | None: ...

    def put(self, key: str, blob: bytes, ttl: float | None = None) -> bool: ...

    def corrupt(self, key: str, exc: BaseException) -> None: ...

    def delete(self, key: str) -> bool: ...

    def clear(self) -> int: ...

    def evict(self, tag: str) -> int | None: ...


class ObjectStore(SharedStore, Protocol):
    """A shared tier that also sweeps its expired entries (``lib.objects.ObjectTier``)."""

    def sweep(self, now: float | None = None) -> int | None: ...

    def redirects(self, fmt: str) -> bool:
        """Whether ``GET /api/audio`` in ``fmt`` is answered with a redirect to the store."""
        ...

    def redirect_url(self, entry: CachedAudio, fmt: str, audio: Callable[[], bytes]) -> str | None:
        """A presigned URL of ``entry`` in ``fmt`` (``audio`` makes the bytes), or None."""
        ...


class Tiers:
    """Memory (ready-to-send WAV), disk (:class:`AudioStore`) and optionally shared.

    ``provenance``: the label every entry served carries (``provenance.provider``; none
    with labels off or no setting). An entry read from disk or a shared tier that was made
    under another setting (before labels, or by another name) is relabelled on its way
    into memory: one copy of its samples, once."""

    def __init__(
        self, config: CacheConfig, store: AudioStore, shared: SharedStore | None, writer: Writer,
        objects: ObjectStore | None = None, provenance: ProvenanceConfig | None = None,
    ) -> None:  # fmt: skip
        self.provider = provenance.active_provider if provenance is not None else None
        self.store = store
        self.shared = shared
        self.objects = objects
        """The object-store tier (cache.objects_url): after Redis, every stored result."""
        self.writer = writer
        self.memory: ByteLRU[str, CachedAudio] = ByteLRU(config.memory_bytes, lambda e: e.nbytes)
        self.transcodes: ByteLRU[tuple[str, str], bytes] = ByteLRU(config.transcode_bytes, len)
        self._pending: dict[str, threading.Event] = {}
        self._pending_lock = threading.Lock()

    # -- reading ----------------------------------------------------------------------------

    def memory_entry(self, key: str) -> CachedAudio | None:
        """The entry from the memory tier alone, unless it has expired."""
        entry = self.memory.get(key)
        if entry is None or not entry.expired():
            return entry
        self.memory.pop(key)
        return None

    def ready_bytes(self, key: str, fmt: str) -> bytes | None:
        """Ready-to-send bytes from memory only (no disk read, no encoding), or None;
        cheap enough for an event loop."""
        entry = self.memory_entry(key)
        if entry is None:
            return None
        if fmt == "wav" or fmt == "pcm":
            return entry.encoded(fmt)  # the ready WAV, or a slice of it
        return self.transcodes.get((key, fmt))

    def lookup(self, key: str) -> tuple[CachedAudio, str] | None:
        """The stored entry and the tier that had it, or None."""
        entry = self.memory_entry(key)
        if entry is not None:
            return entry, "memory"
        entry = self.store.get(key)
        if entry is not None:
            entry = entry.relabelled(self.provider)
            self.memory.put(key, entry)
            return entry, "disk"
        if self.shared is not None:
            entry = self._from_shared(self.shared, key)
            if entry is not None:
                return entry, "shared"
        if self.objects is not None:
            entry = self._from_shared(self.objects, key)
            if entry is not None:
                return entry, "objects"
        return None

    def find(self, key: str) -> CachedAudio | None:
        found = self.lookup(key) if KEY_RE.match(key) else None
        return None if found is None else found[0]

    def _from_shared(self, shared: SharedStore, key: str) -> CachedAudio | None:
        blob = shared.get(key)
        if blob is None:
            return None
        try:
            entry = unpack(blob, key)
        except CorruptEntryError as exc:
            shared.corrupt(key, exc)
            return None
        remaining = entry.remaining()
        if remaining is not None and remaining <= 0:
            return None
        self.store.put_blob(key, blob, tag=str(entry.meta.get("tag", "")), ttl=remaining)
        entry = entry.relabelled(self.provider)
        self.memory.put(key, entry)
        return entry

    def audio_bytes(self, entry: CachedAudio, fmt: str) -> bytes:
        """``entry`` in ``fmt``, labelled; transcodes are kept in memory (MP3, Opus and
        AAC cost tens of ms: bench/bench_openai.py)."""
        if fmt == "wav" or fmt == "pcm":
            return entry.encoded(fmt)
        cached = self.transcodes.get((entry.key, fmt))
        if cached is None:
            cached = entry.encoded(fmt)
            self.transcodes.put((entry.key, fmt), cached)
        return cached

    # -- writing ----------------------------------------------------------------------------

    def keep(self, entry: CachedAudio, *, origin: str = "user", durable: bool = False) -> Future[None]:
        """Serve ``entry`` from memory now; write it to disk, the shared tier and the
        object store in the background. Returns a future done once that write has
        finished in every tier (or failed there: each tier logs its own faults), which is
        when other processes can find the entry. ``origin`` ``preload`` tells the disk
        tier's eviction policy it was not requested.

        ``durable``: write it to disk before returning (the shared tier and the object
        store still follow in the background), so that it survives a crash of the process
        from then on. The segments of a streamed answer are kept so, each before its
        audio is sent: a kill -9 mid-stream loses none that a client has heard (about
        2 ms of FLAC encoding and SQLite per segment, next to the engine's seconds)."""
        self.memory.put(entry.key, entry)
        stored: Future[None] = Future()
        written = threading.Event()
        with self._pending_lock:
            self._pending[entry.key] = written

        def done() -> None:
            with self._pending_lock:
                if self._pending.get(entry.key) is written:
                    del self._pending[entry.key]
            written.set()

        blob: bytes | None = None
        ttl = entry.remaining()
        if durable:
            try:
                blob = pack(entry)
                self.store.put_blob(entry.key, blob, tag=str(entry.meta.get("tag", "")), ttl=ttl, origin=origin)
            except Exception:  # the store logs its own faults; a request never fails for it
                _LOGGER.exception("cache write of %s failed", entry.key)
            done()
            if self.shared is None and self.objects is None:
                stored.set_result(None)  # nothing left to do in the background
                return stored

        def write() -> None:
            try:
                data = blob if blob is not None else pack(entry)
                if not durable:
                    self.store.put_blob(entry.key, data, tag=str(entry.meta.get("tag", "")), ttl=ttl, origin=origin)
                done()  # on disk: what a caller waiting in wait_written needs
                if self.shared is not None:
                    self.shared.put(entry.key, data, ttl=ttl)
                if self.objects is not None:
                    self.objects.put(entry.key, data, ttl=ttl)
            finally:
                done()
                stored.set_result(None)

        try:
            self.writer.submit(write)
        except Exception:
            done()
            stored.set_result(None)
            raise
        return stored

    def flush(self) -> None:
        """Wait for the background writes submitted so far to reach the tiers."""
        self.writer.flush()

    def wait_written(self, key: str, timeout: float = 10.0) -> bool:
        """Wait until the background write of ``key`` (if one is pending) has reached
        the disk tier, so that a URL handed out for it survives a crash of this
        process. True if nothing is pending any more."""
        with self._pending_lock:
            pending = self._pending.get(key)
        return pending is None or pending.wait(timeout)

    # -- removing ---------------------------------------------------------------------------

    def forget(self, key: str) -> bool:
        """Drop one entry from every tier. Other processes' memory tiers keep their
        copy until evicted or restarted."""
        self.writer.flush()  # a queued background write must not bring the entry back
        self.memory.pop(key)
        self.transcodes.discard_where(lambda k: k[0] == key)
        if self.shared is not None:
            self.shared.delete(key)
        if self.objects is not None:
            self.objects.delete(key)
        return self.store.delete(key)

    def drop_memory(self) -> None:
        self.memory.clear()
        self.transcodes.clear()
