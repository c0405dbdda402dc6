"""The service: ties configuration, engine, tiers, voices and statistics together.

``TTSService.synthesise`` is the one path every request takes (web UI, HTTP API,
preload): resolve and validate, look up memory -> disk (-> shared), and on a miss
run the engine once per key across threads and processes, never caching a failure.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lib.audio import PromptDecoder, check_engine_audio, encode
from lib.config import AppConfig, load_config
from lib.diskutil import ensure_private_dir, open_cache
from lib.engines import Engine, create_engine
from lib.engines.base import VoiceProfile
from lib.entry import CachedAudio, CorruptEntryError, pack, unpack
from lib.errors import EngineError, NotFoundError, TTSError, ValidationError
from lib.keys import KEY_RE, model_tag
from lib.lru import ByteLRU
from lib.metrics import Metrics
from lib.request import Resolved, TTSRequest, check_prompt, normalise_fields
from lib.resolve import resolve_request
from lib.results import Exporter, SynthesisResult
from lib.singleflight import DiskLeases, Leases, LocalFlights, Renewer, lead_or_wait
from lib.stats import Stats
from lib.store import AudioStore
from lib.textnorm import cut_text
from lib.voices import VoiceLibrary, VoiceProfiles
from lib.writer import Writer

__all__ = ["TTSService", "get_default_service", "synthesise_with_cache"]

_LOGGER = logging.getLogger(__name__)



class TTSService:
    """One engine and its caches. Thread-safe; build one per process."""

    def __init__(self, config: AppConfig, engine: Engine | None = None) -> None:
        self.config = config
        self.engine = engine if engine is not None else create_engine(config)
        self._presets = frozenset(self.engine.presets())
        self.tag = model_tag(self.engine.name, self.engine.model_version)
        self.cache_dir = Path(config.cache.dir)
        try:
            ensure_private_dir(self.cache_dir)
        except OSError as exc:
            _LOGGER.error("cannot create cache directory %s (%s); serving without it", self.cache_dir, exc)
        self.metrics = Metrics(self._gauges)
        self.store = AudioStore(config.cache, self.cache_dir / "audio", self._store_error)
        self.memory: ByteLRU[str, CachedAudio] = ByteLRU(config.cache.memory_bytes, lambda e: e.nbytes)
        self.transcodes: ByteLRU[tuple[str, str], bytes] = ByteLRU(config.cache.transcode_bytes, len)
        self.stats = Stats(self.cache_dir / "meta")
        self.decoder = PromptDecoder()
        voice_store = self._voice_store = self._open_side_store("voices")
        self.library = VoiceLibrary(voice_store)
        self.profiles = VoiceProfiles(
            self.engine, voice_store, config.voices.memory_bytes, on_extract=self.metrics.voice_extractions.inc
        )
        self.leases: Leases | None = None
        lock_store = self._open_side_store("locks", leases=True)
        if isinstance(lock_store, DiskLeases):
            self.leases = lock_store
        self.shared: Any = None
        """The shared (Redis) tier when configured; see ``lib.shared``."""
        if config.cache.shared_url:
            from lib.shared import SharedTier  # imports redis only when a shared tier is configured

            self.shared = SharedTier(
                config.cache.shared_url,
                on_error=self.metrics.shared_errors.inc,
                counters=lambda: self.stats.snapshot(0)["since_start"],
            )
            self.profiles.shared = self.library.shared = self.shared
            self.leases = self.shared.leases(local=self.leases)  # Redis leases, local ones while it is down
        self.renewer = Renewer(self.leases, config.cache.lock_lease) if self.leases is not None else None
        self.flights: LocalFlights[tuple[CachedAudio, bool]] = LocalFlights()
        self.exporter = Exporter(str(self.cache_dir))
        self.writer = Writer()
        self._closed = False
        if config.voices.prewarm:
            threading.Thread(target=self._prewarm, name="voice-prewarm", daemon=True).start()

    # -- the request path ---------------------------------------------------------------

    def synthesise(self, request: TTSRequest) -> SynthesisResult:
        """Answer one request from the cache or the engine. Raises :class:`TTSError`."""
        started = time.perf_counter()
        resolved: Resolved | None = None
        try:
            resolved = self.resolve(request)
            result = self._answer(resolved, started)
        except TTSError as exc:
            seconds = time.perf_counter() - started
            self.stats.record("error", seconds, None, None)
            self.metrics.requests.labels("error").inc()
            self.metrics.latency.labels("error").observe(seconds)
            key = resolved.key if resolved is not None else "-"
            _LOGGER.info("request failed key=%s text=%r: %s", key, cut_text(request.text or ""), exc)
            raise
        seconds = time.perf_counter() - started
        label = result.cache.lower()
        self.stats.record(label, seconds, result.key, resolved.fields.text, resolved.fields.voice)
        self.metrics.requests.labels(label).inc()
        self.metrics.latency.labels(label).observe(seconds)
        _LOGGER.info(
            "%s key=%s %.1f ms text=%r", result.cache, result.key, seconds * 1e3, cut_text(resolved.fields.text)
        )
        return result

    def resolve(self, request: TTSRequest) -> Resolved:
        """Validate and normalise ``request`` and compute its key (no synthesis)."""
        text, prompt_text, style = normalise_fields(request, self.config)
        return resolve_request(request, self, text, prompt_text, style)

    def _answer(self, r: Resolved, started: float) -> SynthesisResult:
        if not r.use_cache:
            entry, spent = self._produce(r, store=False, release=lambda: None)
            return self._result(r, "BYPASS", entry, started, spent)
        found = self.lookup(r.key)
        if found is not None:
            entry, tier = found
            return self._result(r, "HIT", entry, started, {}, tier)

        timings: dict[str, float] = {}  # filled by produce() when this caller leads

        def produce(release: Callable[[], None]) -> CachedAudio:
            entry, spent = self._produce(r, store=r.store, release=release)
            timings.update(spent)
            return entry

        def lead() -> tuple[CachedAudio, bool]:
            return lead_or_wait(
                r.key, self.leases, self.renewer,
                lease=self.config.cache.lock_lease, timeout=self.config.cache.lock_timeout,
                lookup=lambda: self._found(r.key),
                produce=produce,
                on_lock_error=lambda exc: self._store_error("lock", exc),
            )  # fmt: skip

        (entry, produced), led = self.flights.run(r.key, lead)
        if produced and led:
            return self._result(r, "MISS", entry, started, timings)
        # Waited for another thread's or process's synthesis of the same key.
        return self._result(r, "HIT", entry, started, {}, "single-flight")

    def _result(
        self, r: Resolved, cache: str, entry: CachedAudio, started: float, timings: dict[str, float], tier: str = ""
    ) -> SynthesisResult:
        timings = dict(timings)
        timings["total"] = round((time.perf_counter() - started) * 1e3, 3)
        info = dict(entry.meta.get("info", {}))
        if tier:
            info["tier"] = tier
            self.metrics.tier_hits.labels(tier).inc()
        return SynthesisResult(r.key, cache, entry, timings, info, self.exporter)

    def memory_entry(self, key: str) -> CachedAudio | None:
        """The entry from the memory tier alone, unless it has expired."""
        entry = self.memory.get(key)
        if entry is None:
            return None
        expires = entry.meta.get("expires")
        if expires is None or expires > time.time():
            return entry
        self.memory.pop(key)
        return None

    def ready_bytes(self, key: str, fmt: str) -> bytes | None:
        """Ready-to-send bytes from memory only (no disk read, no encoding), or None;
        cheap enough for an event loop."""
        entry = self.memory_entry(key)
        if entry is None:
            return None
        return entry.wav if fmt == "wav" else self.transcodes.get((key, fmt))

    def lookup(self, key: str) -> tuple[CachedAudio, str] | None:
        """Find a stored entry in memory, on disk or in the shared tier."""
        entry = self.memory_entry(key)
        if entry is not None:
            return entry, "memory"
        entry = self.store.get(key)
        if entry is not None:
            self.memory.put(key, entry)
            return entry, "disk"
        if self.shared is not None:
            blob = self.shared.get(key)
            if blob is not None:
                try:
                    entry = unpack(blob, key)
                except CorruptEntryError as exc:
                    self.shared.corrupt(key, exc)
                    return None
                ttl = entry.meta.get("expires")
                remaining = None if ttl is None else max(1.0, ttl - time.time())
                self.store.put_blob(key, blob, tag=str(entry.meta.get("tag", self.tag)), ttl=remaining)
                self.memory.put(key, entry)
                return entry, "shared"
        return None

    def _found(self, key: str) -> CachedAudio | None:
        found = self.lookup(key)
        return None if found is None else found[0]

    def _produce(
        self, r: Resolved, *, store: bool, release: Callable[[], None]
    ) -> tuple[CachedAudio, dict[str, float]]:
        """Run the engine for ``r``; validate its audio; store it unless told not to.
        ``release`` (the single-flight lease) is called once the entry is on disk."""
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        voice = self._voice_for(r)
        timings["voice"] = round((time.perf_counter() - t0) * 1e3, 3)
        f = r.fields
        t1 = time.perf_counter()
        try:
            synth = self.engine.synthesise(f.text, voice, style=f.style, seed=f.seed, speed=f.speed, mode=f.mode)
        except TTSError:
            raise
        except Exception as exc:
            _LOGGER.exception("engine %s failed on key=%s", self.engine.name, r.key)
            name = self.engine.name
            raise EngineError(f"the {name} engine failed ({type(exc).__name__}); nothing was cached") from exc
        finally:
            self.stats.engine_call()
            self.metrics.engine_calls.inc()
        engine_seconds = time.perf_counter() - t1
        self.metrics.engine_latency.observe(engine_seconds)
        timings["engine"] = round(engine_seconds * 1e3, 3)
        pcm = check_engine_audio(synth.audio)
        now = time.time()
        ttl = r.ttl if r.ttl is not None else self.config.cache.ttl
        meta: dict[str, Any] = {
            "created": now,
            "expires": None if ttl is None else now + ttl,
            "engine": self.engine.name,
            "model_version": self.engine.model_version,
            "tag": self.tag,
            "voice": f.voice,
            "mode": f.mode,
            "info": dict(synth.info),
        }
        if self.config.cache.store_text:
            meta["text"] = f.text
        entry = CachedAudio.from_pcm(r.key, pcm, self.engine.sample_rate, meta)
        if not store:
            release()
            return entry, timings
        self.memory.put(r.key, entry)

        def write() -> None:
            try:
                blob = pack(entry)
                self.store.put_blob(r.key, blob, tag=self.tag, ttl=ttl)
                if self.shared is not None:
                    self.shared.put(r.key, blob, ttl=ttl)
            finally:
                release()

        self.writer.submit(write)
        return entry, timings

    def flush(self) -> None:
        """Wait for background writes to reach the store."""
        self.writer.flush()

    def _voice_for(self, r: Resolved) -> VoiceProfile:
        if r.preset is not None:
            return self.engine.preset_voice(r.preset)
        if r.prompt is None:  # pragma: no cover - resolve guarantees one of the two
            raise ValidationError("no voice given")
        return self.profiles.get(r.prompt, r.fields.prompt_text)

    # -- audio for the HTTP API ---------------------------------------------------------

    def audio_bytes(self, entry: CachedAudio, fmt: str) -> bytes:
        """``entry`` in ``fmt``; transcodes are kept in memory (MP3 costs ~15-40 ms)."""
        if fmt == "wav":
            return entry.wav
        cached = self.transcodes.get((entry.key, fmt))
        if cached is None:
            cached = encode(entry.pcm, entry.sample_rate, fmt)
            self.transcodes.put((entry.key, fmt), cached)
        return cached

    def stored_audio(self, key: str) -> CachedAudio | None:
        """The stored entry for ``key`` without synthesising (``GET /api/audio``)."""
        if not KEY_RE.match(key):
            return None
        found = self.lookup(key)
        return None if found is None else found[0]

    # -- voices -------------------------------------------------------------------------

    def is_preset(self, name: str) -> bool:
        return name in self._presets

    def list_voices(self) -> list[dict[str, Any]]:
        voices: list[dict[str, Any]] = [{"name": n, "kind": "preset"} for n in sorted(self._presets)]
        for name in self.library.names():
            saved = self.library.get(name)
            if saved is not None:
                voices.append(saved.describe())
        return voices

    def save_voice(self, name: str, prompt_audio: Any, prompt_text: str = "") -> dict[str, Any]:
        """Save a prompt under ``name``; its profile is extracted now, so a prompt that
        cannot be a voice is refused at once and the first request in it is fast."""
        name = self.library.check_name(name)
        if self.is_preset(name):
            raise ValidationError(f"voice name {name!r} is a preset voice; choose another name")
        if prompt_audio is None:
            raise ValidationError("prompt_audio: upload or record the voice to save")
        prompt = self.decoder.decode(prompt_audio)
        check_prompt(prompt, self.config)
        _, clean_prompt_text, _ = normalise_fields(TTSRequest(text="x", prompt_text=prompt_text), self.config)
        self.profiles.get(prompt, clean_prompt_text if "zero_shot" in self.engine.modes else "")
        return self.library.save(name, prompt, clean_prompt_text).describe()

    def delete_voice(self, name: str) -> None:
        if not self.library.delete(name):
            raise NotFoundError(f"no saved voice named {name!r}")

    def _prewarm(self) -> None:
        for name in self.library.names():
            if self._closed:
                return
            saved = self.library.get(name)
            if saved is None:
                continue
            try:
                self.profiles.get(saved.prompt, saved.prompt_text)
            except Exception as exc:  # a damaged voice must not stop start-up
                _LOGGER.warning("could not prewarm voice %r: %s", name, exc)

    # -- administration -----------------------------------------------------------------

    def clear(self) -> dict[str, Any]:
        self.flush()
        removed = self.store.clear()
        self.memory.clear()
        self.transcodes.clear()
        shared = self.shared.clear() if self.shared is not None else 0
        _LOGGER.warning("cache cleared: %d entries removed", removed)
        return {"removed": removed, "shared_removed": shared}

    def evict(self, tag: str) -> dict[str, Any]:
        if not tag or len(tag) > 200:
            raise ValidationError("tag: give engine:model_version or voice:<fingerprint>")
        self.flush()
        removed = self.store.evict(tag)
        self.memory.clear()
        self.transcodes.clear()
        return {"tag": tag, "removed": removed}

    def forget(self, key: str) -> bool:
        """Drop one entry from every tier (``preload_cache.py --force`` regenerates it).
        Other processes' memory tiers keep their copy until evicted or restarted."""
        if not KEY_RE.match(key):
            raise ValidationError("key: must be 32 hexadecimal digits")
        self.flush()  # a queued background write must not bring the entry back
        self.memory.pop(key)
        self.transcodes.discard_where(lambda k: k[0] == key)
        delete = getattr(self.shared, "delete", None)
        if callable(delete):
            delete(key)
        return self.store.delete(key)

    def sweep_expired(self) -> dict[str, Any]:
        self.flush()
        return {"expired_removed": self.store.expire()}

    def verify(self) -> dict[str, Any]:
        self.flush()
        report = self.store.verify()
        self.memory.clear()
        return report

    def snapshot(self, top: int = 20) -> dict[str, Any]:
        """Everything the dashboard and ``/api/cache/stats`` show."""
        self.flush()
        snap = self.stats.snapshot(top)
        store = self.store.stats()
        since, total = snap["since_start"], snap["total"]
        snap.update(
            entries=store["entries"], bytes=store["bytes"], size_limit=store["size_limit"],
            memory_entries=len(self.memory), memory_bytes=self.memory.nbytes,
            hits=since["hits"], misses=since["misses"], bypasses=since["bypasses"],
            errors=since["errors"], engine_calls=since["engine_calls"],
            hits_total=total["hits"], misses_total=total["misses"],
            engine=self.engine.name, model_version=self.engine.model_version, tag=self.tag,
            cache_available=self.store.available, cache_error=self.store.last_error,
            shared=self.shared.status() if self.shared is not None else None,
        )  # fmt: skip
        return snap

    def health(self) -> dict[str, Any]:
        return {
            "status": "ok",
            "engine": self.engine.name,
            "model_version": self.engine.model_version,
            "cache": {"available": self.store.available, "dir": str(self.cache_dir), "error": self.store.last_error},
            # Only the breaker's state: a health check must not wait on a slow Redis.
            "shared": {"up": bool(self.shared.up)} if self.shared is not None else None,
        }

    def close(self) -> None:
        self._closed = True
        self.writer.close()
        if self.renewer is not None:
            self.renewer.stop()
        self.stats.close()
        self.store.close()
        if isinstance(self.leases, DiskLeases):
            self.leases.close()
        if self._voice_store is not None:
            self._voice_store.close()
        if self.shared is not None:
            self.shared.close()
        self.engine.close()

    # -- internals ----------------------------------------------------------------------

    def _store_error(self, op: str, exc: BaseException) -> None:
        self.metrics.cache_errors.labels(op).inc()

    def _gauges(self) -> dict[str, Any]:
        values = dict(self.store.stats())
        values["memory_bytes"] = self.memory.nbytes
        values["shared_up"] = 1 if self.shared is not None and self.shared.up else 0
        return values

    def _open_side_store(self, name: str, leases: bool = False) -> Any:
        path = self.cache_dir / name
        try:
            if leases:
                return DiskLeases(str(path))
            return open_cache(path, eviction_policy="none", size_limit=2**40)
        except Exception as exc:
            _LOGGER.error("cannot open %s (%s); continuing without it", path, exc)
            return None


_default: TTSService | None = None
_default_lock = threading.Lock()


def get_default_service() -> TTSService:
    """A process-wide service built from ``config.yaml`` (if present) and ``TTS_*``."""
    global _default
    with _default_lock:
        if _default is None:
            path = Path("config.yaml")
            _default = TTSService(load_config(path if path.is_file() else None))
        return _default


def synthesise_with_cache(
    text: str, *, service: TTSService | None = None, **fields: Any
) -> SynthesisResult:
    """Synthesise ``text`` through the cache. ``fields`` are those of
    :class:`lib.request.TTSRequest` (prompt_audio, prompt_text, voice, style, seed,
    speed, mode, format, use_cache, store, ttl)."""
    try:
        request = TTSRequest(text=text, **fields)
    except TypeError as exc:
        raise ValidationError(str(exc)) from exc
    return (service or get_default_service()).synthesise(request)
