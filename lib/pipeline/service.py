"""The service: the one request path, and the documented parts around it.

``TTSService.synthesise`` (and ``stream``, the same answer as chunks) is the one path
every request takes (web UI, HTTP API, preload): resolve and validate
(:mod:`lib.pipeline.resolve`), look up memory -> disk (-> shared -> objects) (:mod:`lib.cache.tiers`),
compose a template's answer from cached pieces (:mod:`lib.compose.templatebook`), and on a miss
make the result from sentence segments (:mod:`lib.compose.composer`), each run by the engine
(:mod:`lib.compose.produce`) once per key across threads and processes
(:mod:`lib.cache.production`), never caching a failure.

Everything else is a documented part with its own public methods (each
permission-checked one takes the ``caller`` as a required keyword):

- ``voices`` (:class:`lib.voices.Voices`): presets and saved voices: ``list``, ``save``,
  ``delete``, ``is_preset``; its ``library``, ``profiles`` and ``decoder``;
- ``admin`` (:class:`lib.ops.admin.Admin`): ``clear``, ``evict``, ``forget``,
  ``sweep_expired``, ``verify``;
- ``dashboard`` (:class:`lib.ops.dashboard.Dashboard`): ``snapshot``, ``health``, ``tags``,
  the ``metrics`` and ``stats``;
- ``files`` (:class:`lib.audio.files.ResultFiles`): private result files for the web UI;
- ``cache`` (:class:`lib.cache.tiers.Tiers`): stored results without synthesis:
  ``lookup``, ``find``, ``memory_entry``, ``ready_bytes``, ``audio_bytes``,
  ``wait_written``, ``flush``; its ``store``, ``memory``, ``shared``, ``objects``;
- ``templates`` (:class:`lib.compose.templatebook.TemplateBook`): the templates answered
  from pieces, and the pieces a preload makes;
- ``singleflight`` (:class:`lib.cache.production.Production`): a key's production run
  once across threads, processes and replicas; its ``leases`` and ``renewer``;
- ``readings`` (:class:`lib.readings.Readings`): the text front end and the operator's
  lexicon: ``read``, ``key_part``, ``entries``, ``add`` and ``remove`` (admin),
  ``status``; its ``front_end`` and ``lexicon``;
- ``takes`` (:class:`lib.takes.operations.Takes`): approved takes: ``render``,
  ``approve`` and ``withdraw`` (admin), ``listing``; its ``book``.

A request that names no seed is answered its phrase's approved take when it has one
(``SynthesisResult.take == "approved"``): one dict lookup, on the hit path too.

The parts are built by one factory, :func:`lib.pipeline.wiring.wire`.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from lib.cache.entry import CachedAudio
from lib.compose.composer import Made, OnChunk, OnSegment
from lib.compose.templates import Template
from lib.config import AppConfig, default_config_path, load_config
from lib.engines import Engine
from lib.errors import TTSError, ValidationError
from lib.pipeline.recording import AnyRequest
from lib.pipeline.results import SynthesisResult
from lib.pipeline.streaming import StreamAnswer
from lib.pipeline.wiring import FROM_ENV, wire
from lib.request.access import AccessPolicy
from lib.request.types import ConvertRequest, Resolved, TTSRequest
from lib.tenants import acting, current_account

__all__ = ["MemoryLookup", "TTSService", "get_default_service", "synthesise_with_cache"]

_LOGGER = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class MemoryLookup:
    """What memory alone says of a request (:meth:`TTSService.memory_lookup`): its hit,
    and its resolution (None when resolving it needs I/O or it was refused)."""

    result: SynthesisResult | None
    resolved: Resolved | None


class TTSService:
    """One engine and its caches: the request path and the documented parts (see the
    module). Thread-safe; build one per process."""

    def __init__(self, config: AppConfig, engine: Engine | None = None, *, admin_token: Any = FROM_ENV) -> None:
        """``engine``: the engine to speak with (else the configured one).
        ``admin_token``: a fixed admin token (None: no token) instead of the variable
        ``server.admin_token_env``; the access policy never changes afterwards."""
        parts = wire(config, engine, admin_token=admin_token)
        self.config = config
        self.engine = parts.engine
        """The engine as built (tests read its counters); calls go through the watchdog."""
        self.tag = parts.tag
        """``engine:model_version``: the tag of every entry this service makes."""
        self.access: AccessPolicy = parts.access
        """Who may do what; the boundaries ask it who is calling (lib.request.access)."""
        self.watchdog = parts.watchdog
        """Deadlines on every engine call and the engine's health (lib.engines.watchdog)."""
        self.voices = parts.voices
        self.admin = parts.admin
        self.dashboard = parts.dashboard
        self.files = parts.files
        self.cache = parts.tiers
        self.templates = parts.templates
        self.singleflight = parts.singleflight
        self.readings = parts.readings
        self.takes = parts.takes
        self.tenants = parts.tenants
        """API keys, each caller's limits and usage (lib.tenants)."""
        self._answering = parts.takes.answering
        """The approval whose take answers a request, or None: one dict lookup (the hit path's)."""
        self._parts = parts
        self._resolver = parts.resolver
        self._composer = parts.composer
        self._recorder = parts.recorder
        self._closed = False

    # -- the request path ---------------------------------------------------------------
    # Routing only: a hit, a template composed from pieces, or a miss made from segments
    # (lib.compose.composer). Texts of one segment with nothing to finish take the old path.

    def synthesise(self, request: TTSRequest | Resolved) -> SynthesisResult:
        """Answer one request (or its :meth:`resolve`) from the cache or the engine. Raises :class:`TTSError`."""
        return self._serve(request, self._resolver.resolve)

    def convert(self, request: ConvertRequest | Resolved) -> SynthesisResult:
        """Convert mode: the source recording's words in the target voice, through the
        same cache and single-flight as :meth:`synthesise`. Raises :class:`TTSError`."""
        return self._serve(request, self._resolver.resolve_convert)

    def _serve(self, request: AnyRequest, resolve: Callable[[Any], Resolved]) -> SynthesisResult:
        started = time.perf_counter()
        r = self._resolve(request, resolve, started)
        try:
            result = self._quick(r, request, started)
            if result is None:
                with self.tenants.admit_miss(_price(r)):  # the caller's limits, before any engine work
                    result = self._make(r, started)
        except TTSError as exc:
            self._recorder.failed(request, r, exc, started)
            raise
        self._recorder.record(request, r, result, started)
        return result

    def memory_hit(self, request: TTSRequest) -> SynthesisResult | None:
        """:meth:`synthesise` for a hit in the memory tier, recorded alike, without any
        I/O, so an event loop may call it (the HTTP hit path, no thread hop). None when
        answering needs more (a prompt to decode, a voice or an entry from disk, a
        template, the engine) or the request is refused: then call :meth:`synthesise`,
        which records it once."""
        return self.memory_lookup(request).result

    def memory_lookup(self, request: TTSRequest) -> MemoryLookup:
        """:meth:`memory_hit`, and on a miss the resolution memory alone made: hand it to
        :meth:`synthesise` or :meth:`stream` (in a worker thread) so that the request is
        resolved once. No I/O."""
        started = time.perf_counter()
        try:
            r = self._resolver.resolve_in_memory(request)
        except TTSError:
            return MemoryLookup(None, None)  # refused: synthesise() says why, and records it
        if r is None or not r.use_cache:
            return MemoryLookup(None, r)
        approval = self._answering(r)
        key = r.key if approval is None else approval.key
        entry = self.cache.memory_entry(key)
        if entry is None:
            return MemoryLookup(None, r)
        result = self._hit(key, entry, "memory", started)
        if approval is not None:
            result.take = "approved"
        self._recorder.record(request, r, result, started)
        return MemoryLookup(result, r)

    def stream(self, request: TTSRequest | Resolved) -> StreamAnswer:
        """Answer one request as audio chunks, each as soon as it exists. A hit or a
        composed answer comes whole at once; a miss is made by a thread of its own, for
        whoever waits for it now (lib.core.waiting: the HTTP boundary's caller, or
        nobody watched): when all its waiters leave, its segments not yet started are not
        made and the whole is not stored."""
        started = time.perf_counter()
        r = self._resolve(request, self._resolver.resolve, started)
        try:
            quick = self._quick(r, request, started)
        except TTSError as exc:
            self._recorder.failed(request, r, exc, started)
            raise
        if quick is not None:
            self._recorder.record(request, r, quick, started)
            self._recorder.first_audio(quick.cache, started)
            return StreamAnswer.whole(quick)
        cache = "MISS" if r.use_cache else "BYPASS"
        try:
            ticket = self.tenants.admit_miss(_price(r))
        except TTSError as exc:
            self._recorder.failed(request, r, exc, started)
            raise
        account = current_account()  # the stream is made by a thread of its own: named to it

        def done(result: SynthesisResult) -> None:
            ticket.close()
            with acting(account):
                self._recorder.record(request, r, result, started)

        def failed(exc: BaseException) -> None:
            ticket.close()
            self._recorder.failed(request, r, exc, started)

        try:
            return self._parts.streams.launch(
                r.key, cache, self.engine.sample_rate,
                make=lambda on_chunk, on_segment: self._make(r, started, on_chunk, on_segment),
                first=lambda: self._recorder.first_audio(cache, started),
                done=done, failed=failed,
            )  # fmt: skip
        except BaseException:
            ticket.close()
            raise

    def _resolve(self, request: AnyRequest, resolve: Callable[[Any], Resolved], started: float) -> Resolved:
        if isinstance(request, Resolved):  # resolved by the caller (the web UI's form check): not again
            return request
        try:
            return resolve(request)
        except TTSError as exc:
            self._recorder.failed(request, None, exc, started)
            raise

    def _quick(self, r: Resolved, request: AnyRequest, started: float) -> SynthesisResult | None:
        """A hit, or an answer composed from a template's pieces; None for a miss."""
        if not r.use_cache:
            return None
        approval = self._answering(r)
        if approval is not None:
            approved = self.takes.approved_entry(approval)
            if approved is not None:
                result = self._hit(approval.key, approved[0], approved[1], started)
                result.take = "approved"
                return result
            _LOGGER.error("approved take %s of a phrase is lost; answered unapproved", approval.key)
        found = self.cache.lookup(r.key)
        if found is not None:
            return self._hit(r.key, found[0], found[1], started)
        # A preloaded phrase is stored whole, never composed; a conversion has no text.
        match = self.templates.match(r) if request.origin != "preload" and r.source is None else None
        if match is None:
            return None
        entry, made = self._composer.compose(r, match)
        if match.template.refine and r.store:
            self._parts.refiner.submit(r)
        return self._result(r, entry, made, started)

    def _make(
        self, r: Resolved, started: float, on_chunk: OnChunk | None = None, on_segment: OnSegment | None = None
    ) -> SynthesisResult:
        make = self._composer.make if r.use_cache else self._composer.bypass
        entry, made = make(r, on_chunk, on_segment)
        if made.cache == "HIT":  # waited for another thread's or process's synthesis of the same key
            return self._hit(r.key, entry, made.tier, started)
        return self._result(r, entry, made, started)

    def _result(self, r: Resolved, entry: CachedAudio, made: Made, started: float) -> SynthesisResult:
        result = SynthesisResult.made(r.key, made.cache, entry, started, made.timings, files=self.files)
        result.info = {**result.info, **made.info()}
        return result

    def _hit(self, key: str, entry: CachedAudio, tier: str, started: float) -> SynthesisResult:
        self._parts.metrics.count_tier_hit(tier)
        return SynthesisResult.made(key, "HIT", entry, started, {}, tier, files=self.files)

    def segment_count(self, request: TTSRequest | Resolved) -> int:
        """How many sentences (segments) a miss of ``request`` is made in: the progress
        of a long one ("3/6"). 1 for a text made whole, or one that cannot be resolved."""
        try:
            r = request if isinstance(request, Resolved) else self._resolver.resolve(request)
        except TTSError:
            return 1
        return self._composer.segment_count(r)

    def resolve(self, request: TTSRequest | ConvertRequest) -> Resolved:
        """Validate and normalise ``request`` and compute its key (no synthesis)."""
        if isinstance(request, ConvertRequest):
            return self._resolver.resolve_convert(request)
        return self._resolver.resolve(request)

    def preload_piece(self, template: Template, text: str, *, force: bool = False, dry_run: bool = False) -> str:
        """Make sure one piece of ``template`` is cached (the preload): ``generated`` or
        ``cached``. Raises :class:`TTSError` when the template's voice cannot be used."""
        piece = self.templates.piece_request(template, text)
        if piece is None:
            raise ValidationError(f"{template.entry}: its voice cannot be used by the {self.engine.name} engine")
        piece = dataclasses.replace(piece, origin="preload")  # not a request: the eviction policy knows
        started = time.perf_counter()
        outcome = self._composer.piece(piece, template.id, force=force, dry_run=dry_run)
        if outcome == "generated" and not dry_run:
            self._recorder.piece_made(started)
        return outcome

    def settle(self, timeout: float = 60.0) -> bool:
        """Wait until the background work requests started has finished: streams whose
        reader left and refinements of template answers. False if some was still running after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        self._parts.streams.close(timeout)  # joins the threads running now; new ones may start
        return self._parts.refiner.wait(max(0.0, deadline - time.monotonic()))

    # -- lifecycle ----------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` has begun: work of the layers above (batch jobs) stops."""
        return self._closed

    def close(self) -> None:
        """Finish pending writes, stop and join every thread, close every store."""
        if self._closed:
            return
        self._closed = True
        p = self._parts
        # First: a call stuck in the engine is interrupted and every caller waiting on one
        # fails at once, so that nothing below waits for the engine (SIGTERM ends in seconds).
        p.watchdog.close()
        p.voices.close()
        p.refiner.close()
        p.streams.close()
        if p.prewarm is not None:
            p.prewarm.join(timeout=30)
        p.readings.close()
        p.takes.close()
        p.tenants.flush()
        p.writer.close()
        if p.singleflight.renewer is not None:
            p.singleflight.renewer.stop()
        p.stats.close()
        p.disks.close()
        if p.shared is not None:
            p.shared.close()
        if p.objects is not None:
            p.objects.close()
        p.files.close()
        p.watchdog.close_engine()


#: A conversion sends audio, not text: priced as the characters of speech that long.
_CHARS_PER_SOURCE_SECOND = 10


def _price(r: Resolved) -> int:
    """Characters a miss of ``r`` sends to the engine (its limits count them)."""
    if r.source is not None:
        return max(1, round(r.source.seconds * _CHARS_PER_SOURCE_SECOND))
    return len(r.fields.text)


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
    :class:`lib.request.types.TTSRequest` (prompt_audio, prompt_text, voice, style, seed,
    speed, mode, format, use_cache, store, ttl)."""
    try:
        request = TTSRequest(text=text, **fields)
    except TypeError as exc:
        raise ValidationError(str(exc)) from exc
    return (service or get_default_service()).synthesise(request)
