"""The service: composes configuration, engine, tiers, voices and statistics.

``TTSService.synthesise`` (and ``stream``, the same answer as chunks) is the one path
every request takes (web UI, HTTP API, preload): resolve and validate
(:mod:`lib.resolve`), look up memory -> disk (-> shared -> objects) (:mod:`lib.cache.tiers`),
compose a template's answer from cached pieces (:mod:`lib.compose.templatebook`), and on a miss
make the result from sentence segments (:mod:`lib.compose.composer`), each run by the engine
(:mod:`lib.produce`) once per key across threads and processes
(:mod:`lib.cache.singleflight`), never caching a failure. The roles live in their own
modules; this one wires them and routes.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lib.access import LOCAL, AccessPolicy, Action, Caller, allows
from lib.admin import Admin
from lib.audio import PromptDecoder, PromptLimits
from lib.cache.entry import CachedAudio
from lib.cache.keys import KEY_RE, model_tag
from lib.cache.leases import Leases, Renewer
from lib.cache.stores import LocalStores
from lib.cache.tiers import Tiers
from lib.cache.writer import Writer
from lib.compose.composer import Composer, Made, OnChunk
from lib.compose.refine import Refiner
from lib.compose.templatebook import TemplateBook
from lib.compose.templates import Template
from lib.config import AppConfig, default_config_path, load_config
from lib.dashboard import Dashboard
from lib.engines import Engine, create_engine
from lib.engines.watched import WatchedEngine
from lib.errors import TTSError, ValidationError
from lib.files import ResultFiles
from lib.metrics import Metrics
from lib.objects import configured_objects
from lib.produce import Producer
from lib.recording import AnyRequest, Recorder
from lib.request import ConvertRequest, PromptSource, Resolved, TTSRequest
from lib.resolve import Resolver
from lib.results import SynthesisResult
from lib.stats import Stats
from lib.streaming import StreamAnswer, StreamJobs
from lib.upgrade import Readiness
from lib.voices import Voices
from lib.voices.library import VoiceLibrary
from lib.voices.profiles import VoiceProfiles
from lib.watchdog import Watchdog

if TYPE_CHECKING:
    from lib.objects.tier import ObjectTier
    from lib.shared.tier import SharedTier

__all__ = ["TTSService", "get_default_service", "synthesise_with_cache"]

_LOGGER = logging.getLogger(__name__)


class TTSService:
    """One engine and its caches. Thread-safe; build one per process."""

    def __init__(self, config: AppConfig, engine: Engine | None = None) -> None:
        self.config = config
        self.access = AccessPolicy.from_config(config)
        """Who may do what; the boundaries ask it who is calling (lib.access)."""
        self.engine = engine if engine is not None else create_engine(config)
        self.tag = model_tag(self.engine.name, self.engine.model_version)
        self.cache_dir = Path(config.cache.dir)
        self.metrics = Metrics(lambda: self.dashboard.gauges())
        self.watchdog = Watchdog(self.engine, config.watchdog, self.metrics)
        """Deadlines on every engine call and the engine's health (lib.watchdog)."""
        watched = WatchedEngine(self.engine, self.watchdog)  # what everything that calls the engine gets
        self.disks = LocalStores(config.cache, self._store_error, profile_bytes=config.voices.profile_bytes)
        """Every store under cache.dir, their shared size budget and their upkeep."""
        self.stats = Stats(self.disks.meta, max_phrases=config.cache.stats_phrases)
        self.store = self.disks.audio
        self.shared: SharedTier | None = None
        """The shared (Redis) tier when configured; see ``lib.shared``."""
        if config.cache.shared_url:
            from lib.shared.tier import SharedTier  # imports redis only when a shared tier is configured

            self.shared = SharedTier(
                config.cache.shared_url,
                on_error=self.metrics.shared_errors.inc,
                counters=self.stats.counters,
            )
        # The object-store tier (lib.objects), None unless cache.objects_url is set.
        self.objects: ObjectTier | None = configured_objects(config.cache, self.metrics.objects_errors.inc)
        self.writer = Writer()
        self.tiers = Tiers(config.cache, self.store, self.shared, self.writer, self.objects, config.provenance)
        self.memory = self.tiers.memory
        self.transcodes = self.tiers.transcodes
        self._voice_store = self.disks.voices
        self.library = VoiceLibrary(self._voice_store, max_saved=config.voices.max_saved)
        self.library.drop_legacy_profiles()
        # Profiles are derived data: their own store, bounded and evicted (saved voices are not).
        self._profile_store = self.disks.profiles
        profiles = VoiceProfiles(
            watched, self._profile_store, config.voices.memory_bytes, on_extract=self.metrics.voice_extractions.inc
        )
        if self.shared is not None:
            profiles.shared = self.library.shared = self.shared
        limits = PromptLimits(max_seconds=config.prompt.max_seconds, max_bytes=config.prompt.max_upload_bytes)
        self.decoder = PromptDecoder(limits, config.prompt.memory_bytes)
        self.voices = Voices(watched, self.library, profiles, self.decoder, config)
        self.profiles = profiles
        self.resolver = Resolver(self.engine, self.voices, config)
        self.producer = Producer(watched, self.voices, self.stats, self.metrics, config)
        self.admin = Admin(self.tiers, profiles, self.decoder, self.disks.verify_side)
        if self.shared is not None:  # evictions and clears on other replicas reach this one's local tiers
            self.shared.follow_evictions(self.admin.apply_remote, self.cache_dir / "shared-evictions.json")
        elif self.objects is not None:  # without Redis, evictions and clears travel through the object store
            self.objects.follow_evictions(self.admin.apply_remote, self.cache_dir / "objects-evictions.json")
        self.files = ResultFiles()
        """Private files for callers that need a path (the web UI), removed on close."""
        readiness = Readiness(self.store, self.resolver.resolve, config.templates.file, self.tag)
        self.dashboard = Dashboard(
            self.engine, self.tag, self.tiers, self.stats, self.shared, readiness, self.disks, self.files
        )
        self._lock_store = self.disks.locks
        # Redis leases, else lease objects in the object store (local ones while down), else local ones.
        self.leases: Leases | None = (
            self.shared.leases(local=self._lock_store) if self.shared is not None
            else self.objects.leases(local=self._lock_store) if self.objects is not None
            else self._lock_store
        )  # fmt: skip
        self.renewer = Renewer(self.leases, config.cache.lock_lease) if self.leases is not None else None
        self.recorder = Recorder(self.stats, self.metrics, config)
        self.composer = Composer(
            self.tiers, self.producer, self.leases, self.renewer, config, self.metrics, self.stats,
            on_lock_error=lambda exc: self._store_error("lock", exc),
        )  # fmt: skip
        self.flights = self.composer.flights
        self.templates = TemplateBook.configured(config, self.resolver.resolve, self.composer.finish)
        """The templates this service composes answers from (lib.compose.templatebook)."""
        self.refiner = Refiner(
            lambda r: self.composer.make(r), on_event=lambda event: self.metrics.refines.labels(event).inc()
        )
        self.streams = StreamJobs()
        self._closed = False
        self._prewarm: threading.Thread | None = None
        if config.voices.prewarm:
            self._prewarm = threading.Thread(target=self.voices.prewarm, name="voice-prewarm", daemon=True)
            self._prewarm.start()

    # -- the request path ---------------------------------------------------------------
    # Routing only: a hit, a template composed from pieces, or a miss made from segments
    # (lib.compose.composer). Texts of one segment with nothing to finish take the old path.

    def synthesise(self, request: TTSRequest | Resolved) -> SynthesisResult:
        """Answer one request (or its :meth:`resolve`) from the cache or the engine. Raises :class:`TTSError`."""
        return self._serve(request, self.resolver.resolve)

    def convert(self, request: ConvertRequest | Resolved) -> SynthesisResult:
        """Convert mode: the source recording's words in the target voice, through the
        same cache and single-flight as :meth:`synthesise`. Raises :class:`TTSError`."""
        return self._serve(request, self.resolver.resolve_convert)

    def _serve(self, request: AnyRequest, resolve: Callable[[Any], Resolved]) -> SynthesisResult:
        started = time.perf_counter()
        r = self._resolve(request, resolve, started)
        try:
            result = self._quick(r, request, started) or self._make(r, started)
        except TTSError as exc:
            self.recorder.failed(request, r, exc, started)
            raise
        self.recorder.record(request, r, result, started)
        return result

    def memory_hit(self, request: TTSRequest) -> SynthesisResult | None:
        """:meth:`synthesise` for a hit in the memory tier, recorded alike, without any
        I/O, so an event loop may call it (the HTTP hit path, no thread hop). None when
        answering needs more (a prompt to decode, a voice or an entry from disk, a
        template, the engine) or the request is refused: then call :meth:`synthesise`,
        which records it once."""
        started = time.perf_counter()
        try:
            r = self.resolver.resolve_in_memory(request)
        except TTSError:
            return None
        if r is None or not r.use_cache:
            return None
        entry = self.tiers.memory_entry(r.key)
        if entry is None:
            return None
        result = self._hit(r.key, entry, "memory", started)
        self.recorder.record(request, r, result, started)
        return result

    def stream(self, request: TTSRequest | Resolved) -> StreamAnswer:
        """Answer one request as audio chunks, each as soon as it exists. A hit or a
        composed answer comes whole at once; a miss is made by a thread of its own, so
        it is finished and stored even when nobody reads it to the end."""
        started = time.perf_counter()
        r = self._resolve(request, self.resolver.resolve, started)
        try:
            quick = self._quick(r, request, started)
        except TTSError as exc:
            self.recorder.failed(request, r, exc, started)
            raise
        if quick is not None:
            self.recorder.record(request, r, quick, started)
            self.recorder.first_audio(quick.cache, started)
            return StreamAnswer.whole(quick)
        cache = "MISS" if r.use_cache else "BYPASS"
        return self.streams.launch(
            r.key, cache, self.engine.sample_rate,
            make=lambda on_chunk: self._make(r, started, on_chunk),
            first=lambda: self.recorder.first_audio(cache, started),
            done=lambda result: self.recorder.record(request, r, result, started),
            failed=lambda exc: self.recorder.failed(request, r, exc, started),
        )  # fmt: skip

    def _resolve(self, request: AnyRequest, resolve: Callable[[Any], Resolved], started: float) -> Resolved:
        if isinstance(request, Resolved):  # resolved by the caller (the web UI's form check): not again
            return request
        try:
            return resolve(request)
        except TTSError as exc:
            self.recorder.failed(request, None, exc, started)
            raise

    def _quick(self, r: Resolved, request: AnyRequest, started: float) -> SynthesisResult | None:
        """A hit, or an answer composed from a template's pieces; None for a miss."""
        if not r.use_cache:
            return None
        found = self.tiers.lookup(r.key)
        if found is not None:
            return self._hit(r.key, found[0], found[1], started)
        # A preloaded phrase is stored whole, never composed; a conversion has no text.
        match = self.templates.match(r) if request.origin != "preload" and r.source is None else None
        if match is None:
            return None
        entry, made = self.composer.compose(r, match)
        if match.template.refine and r.store:
            self.refiner.submit(r)
        return self._result(r, entry, made, started)

    def _make(self, r: Resolved, started: float, on_chunk: OnChunk | None = None) -> SynthesisResult:
        entry, made = self.composer.make(r, on_chunk) if r.use_cache else self.composer.bypass(r, on_chunk)
        if made.cache == "HIT":  # waited for another thread's or process's synthesis of the same key
            return self._hit(r.key, entry, made.tier, started)
        return self._result(r, entry, made, started)

    def _result(self, r: Resolved, entry: CachedAudio, made: Made, started: float) -> SynthesisResult:
        result = SynthesisResult.made(r.key, made.cache, entry, started, made.timings, files=self.files)
        result.info = {**result.info, **made.info()}
        return result

    def _hit(self, key: str, entry: CachedAudio, tier: str, started: float) -> SynthesisResult:
        self.metrics.count_tier_hit(tier)
        return SynthesisResult.made(key, "HIT", entry, started, {}, tier, files=self.files)

    def resolve(self, request: TTSRequest) -> Resolved:
        """Validate and normalise ``request`` and compute its key (no synthesis)."""
        return self.resolver.resolve(request)

    def preload_piece(self, template: Template, text: str, *, force: bool = False, dry_run: bool = False) -> str:
        """Make sure one piece of ``template`` is cached (the preload): ``generated`` or
        ``cached``. Raises :class:`TTSError` when the template's voice cannot be used."""
        piece = self.templates.piece_request(template, text)
        if piece is None:
            raise ValidationError(f"{template.entry}: its voice cannot be used by the {self.engine.name} engine")
        piece = dataclasses.replace(piece, origin="preload")  # not a request: the eviction policy knows
        started = time.perf_counter()
        outcome = self.composer.piece(piece, template.id, force=force, dry_run=dry_run)
        if outcome == "generated" and not dry_run:
            self.recorder.piece_made(started)
        return outcome

    def lookup(self, key: str) -> tuple[CachedAudio, str] | None:
        """Find a stored entry in memory, on disk or in the shared tier."""
        return self.tiers.lookup(key)

    def stored_audio(self, key: str) -> CachedAudio | None:
        """The stored entry for ``key`` without synthesising (``GET /api/audio``)."""
        return self.tiers.find(key) if KEY_RE.match(key) else None

    def memory_entry(self, key: str) -> CachedAudio | None:
        """The unexpired entry from the memory tier alone (cheap enough for an event loop)."""
        return self.tiers.memory_entry(key)

    def ready_bytes(self, key: str, fmt: str) -> bytes | None:
        return self.tiers.ready_bytes(key, fmt)

    def audio_bytes(self, entry: CachedAudio, fmt: str) -> bytes:
        return self.tiers.audio_bytes(entry, fmt)

    def flush(self) -> None:
        """Wait for the background writes submitted so far to reach the store."""
        self.writer.flush()

    def wait_stored(self, key: str, timeout: float = 10.0) -> bool:
        """Wait until a new entry for ``key`` is on disk (before handing out its URL)."""
        return self.tiers.wait_written(key, timeout)

    # -- voices -------------------------------------------------------------------------

    def is_preset(self, name: str) -> bool:
        return self.voices.is_preset(name)

    def list_voices(self, caller: Caller = LOCAL) -> list[dict[str, Any]]:
        """Preset and saved voices; the transcripts (users' texts) for callers allowed to
        read them, ``has_prompt_text`` for the others."""
        voices = self.voices.list()
        if allows(caller, Action.READ_TEXTS):
            return voices
        return [
            {**{k: v for k, v in voice.items() if k != "prompt_text"}, "has_prompt_text": bool(voice["prompt_text"])}
            if "prompt_text" in voice else voice
            for voice in voices
        ]  # fmt: skip

    def save_voice(
        self, name: str, prompt_audio: PromptSource | None, prompt_text: str = "", *,
        replace: bool = False, caller: Caller = LOCAL, consent: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:  # fmt: skip
        return self.voices.save(name, prompt_audio, prompt_text, replace=replace, caller=caller, consent=consent)

    def delete_voice(self, name: str, caller: Caller = LOCAL) -> None:
        self.voices.delete(name, caller=caller)

    # -- administration and reporting ------------------------------------------------------
    # ``caller`` defaults to LOCAL (code in this process); the HTTP API and the UI pass
    # the caller of each request, and lib.access decides.

    def clear(self, caller: Caller = LOCAL) -> dict[str, Any]:
        return self.admin.clear(caller)

    def evict(self, tag: str, caller: Caller = LOCAL) -> dict[str, Any]:
        return self.admin.evict(tag, caller)

    def forget(self, key: str, caller: Caller = LOCAL) -> bool:
        return self.admin.forget(key, caller)

    def sweep_expired(self, caller: Caller = LOCAL) -> dict[str, Any]:
        return self.admin.sweep_expired(caller)

    def verify(self, caller: Caller = LOCAL) -> dict[str, Any]:
        return self.admin.verify(caller)

    def snapshot(self, top: int = 20, caller: Caller = LOCAL) -> dict[str, Any]:
        """Statistics; user texts only for callers allowed to read them."""
        return self.dashboard.snapshot(top, texts=allows(caller, Action.READ_TEXTS))

    def health(self) -> dict[str, Any]:
        """The stores' health (lib.dashboard) and the engine's (lib.watchdog)."""
        return self.watchdog.annotate(self.dashboard.health(str(self.cache_dir)))

    # -- lifecycle ----------------------------------------------------------------------

    def close(self) -> None:
        """Finish pending writes, stop and join every thread, close every store."""
        if self._closed:
            return
        self._closed = True
        # First: a call stuck in the engine is interrupted and every caller waiting on one
        # fails at once, so that nothing below waits for the engine (SIGTERM ends in seconds).
        self.watchdog.close()
        self.voices.close()
        self.refiner.close()
        self.streams.close()
        if self._prewarm is not None:
            self._prewarm.join(timeout=30)
        self.writer.close()
        if self.renewer is not None:
            self.renewer.stop()
        self.stats.close()
        self.disks.close()
        if self.shared is not None:
            self.shared.close()
        if self.objects is not None:
            self.objects.close()
        self.files.close()
        self.watchdog.close_engine()

    # -- internals ----------------------------------------------------------------------

    def _store_error(self, op: str, exc: BaseException) -> None:
        self.metrics.cache_errors.labels(op).inc()


_default: TTSService | None = None
_default_lock = threading.Lock()


def get_default_service() -> TTSService:
    """A process-wide service built from ``config.yaml`` (if present) and ``TTS_*``."""
    global _default
    with _default_lock:
        if _default is None:
            _default = TTSService(load_config(default_config_path()))
        return _default


def synthesise_with_cache(text: str, *, service: TTSService | None = None, **fields: Any) -> SynthesisResult:
    """Synthesise ``text`` through the cache. ``fields`` are those of
    :class:`lib.request.TTSRequest` (prompt_audio, prompt_text, voice, style, seed,
    speed, mode, format, use_cache, store, ttl)."""
    try:
        request = TTSRequest(text=text, **fields)
    except TypeError as exc:
        raise ValidationError(str(exc)) from exc
    return (service or get_default_service()).synthesise(request)
