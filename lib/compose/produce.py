"""Making a new entry: the voice's profile, one engine call, checks on what came back.

Nothing here touches a cache tier; :class:`Producer` returns an entry (or raises) and
the caller decides where it goes. An engine failure, or audio that is empty, invalid or
silent, raises :class:`lib.errors.EngineError` and is never cached.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

import numpy as np
from numpy.typing import NDArray

from lib.audio.pcm import float_to_int16
from lib.cache.entry import CachedAudio
from lib.cache.keys import model_tag
from lib.cache.production import current_lease
from lib.cache.stats import Stats
from lib.config import AppConfig
from lib.core.metrics import Metrics
from lib.engines.base import Engine, VoiceConverter, can_convert
from lib.engines.plausible import InvalidAudioError, check_chunk, check_result
from lib.engines.watchdog import RENEW_UNTIL
from lib.errors import EngineError, TTSError, log_safe
from lib.request.types import Resolved
from lib.text.tokens import Reading
from lib.voices import Voices

__all__ = ["OnChunk", "OnSegment", "Producer", "Reader"]


class Reader(Protocol):
    """Text (and the voice's name, for voice-scoped lexicon entries) -> its reading."""

    def __call__(self, text: str, *, voice: str | None = None) -> Reading: ...


OnChunk = Callable[[NDArray[Any]], None]
"""Receives each int16 chunk of a streamed answer as soon as it exists."""

OnSegment = Callable[[int, int, bool], None]
"""``(done, total, made)``: the ``done``-th of ``total`` segments is ready, made by the
engine now (False: found in the cache); called right before its (last) chunk."""

_LOGGER = logging.getLogger(__name__)


class Producer:
    """Runs the engine for resolved requests."""

    def __init__(
        self, engine: Engine, voices: Voices, stats: Stats, metrics: Metrics, config: AppConfig, *, reader: Reader
    ) -> None:
        """``reader``: the service's readings (:meth:`lib.readings.Readings.read`), so that
        the engine says the text's reading with the operator's lexicon applied: the
        reading the key's reading part stands for, and what ``POST /api/reading`` shows."""
        self.engine = engine
        self.read = reader
        self.voices = voices
        self.stats = stats
        self.metrics = metrics
        self.config = config
        self.tag = model_tag(engine.name, engine.model_version)

    def produce(
        self, r: Resolved, on_chunk: OnChunk | None = None, *, on_piece: OnChunk | None = None
    ) -> tuple[CachedAudio, dict[str, float]]:
        """A new entry for ``r`` and the milliseconds spent (``voice``, ``engine``). With
        ``on_chunk``, the engine's own stream is used and each chunk is passed on as it
        comes; the entry is their concatenation, so what was streamed is what is cached.
        ``on_piece``: the same, but only when the engine makes this request in pieces (its
        ``piecewise_for``: the builtin engine's Kokoro base); then the entry's
        ``info.pieces`` lists the pieces' sizes (:class:`lib.compose.assemble.PieceFinisher`
        finishes such a unit piece by piece, streamed or not).

        ``self.engine`` is the engine behind the watchdog (lib.engines.watched): every call
        has a deadline, and the lease this runs under (the key's single-flight lease,
        :func:`lib.cache.production.current_lease`) is not renewed past the deadline of
        the call running under it."""
        bound = RENEW_UNTIL.set(current_lease().renew_until)
        try:
            return self._produce(r, on_chunk, on_piece)
        except InvalidAudioError as exc:
            # Wherever it was found (the engine's raw chunks, a sentence, the whole), one count.
            self.metrics.engine_invalid_audio.labels(self.engine.name, exc.reason).inc()
            _LOGGER.error("engine %s produced invalid audio for key=%s: %s", self.engine.name, r.key, exc.reason)
            raise
        finally:
            RENEW_UNTIL.reset(bound)

    def meta(
        self, r: Resolved, *, role: str = "", engine_seconds: float | None = None,
        info: Mapping[str, Any] | None = None, segments: Sequence[str] = (),
    ) -> dict[str, Any]:  # fmt: skip
        """The metadata of a new entry for ``r`` (the one place it is built: an engine's
        entry here, a composed or segmented result in :mod:`lib.compose.composer`).
        ``created`` and ``expires`` (None: kept until evicted) come from ``r.ttl``; the
        text only with ``cache.store_text`` on, and never a conversion's (it has none);
        ``provider`` with labels on; ``role``, ``engine_seconds``, ``info`` and the
        ``segments`` keys when given; for a synthesis, the take it is (``phrase``,
        ``seed``, ``speed``, ``voice_name``; ``style`` with the text)."""
        now = time.time()
        engine = self.engine
        meta: dict[str, Any] = {
            "created": now,
            "expires": None if r.ttl is None else now + r.ttl,
            "engine": engine.name,
            "model_version": engine.model_version,
            "tag": self.tag,
            "voice": r.fields.voice,
            "mode": r.fields.mode,
        }
        if role:
            meta["role"] = role
        if engine_seconds is not None:
            meta["engine_seconds"] = round(engine_seconds, 4)
        if info is not None:
            meta["info"] = dict(info)
        if segments:
            meta["segments"] = list(segments)
        provider = self.config.provenance.active_provider
        if provider is not None:  # the label its files carry (lib.audio.provenance)
            meta["provider"] = provider
        if self.config.cache.store_text and r.source is None:
            meta["text"] = r.fields.text
            meta["style"] = r.fields.style
            if r.fields.speed != 1.0:  # what `cache verify` judges the text's length at
                meta["speed"] = r.fields.speed
        if r.phrase:  # which take of which phrase this is: what approving its key needs (lib.takes)
            meta.update(phrase=r.phrase, seed=r.fields.seed, speed=r.fields.speed, voice_name=r.voice_name)
        return meta

    def _produce(
        self, r: Resolved, on_chunk: OnChunk | None, on_piece: OnChunk | None = None
    ) -> tuple[CachedAudio, dict[str, float]]:
        timings: dict[str, float] = {}
        t0 = time.perf_counter()
        voice = self.voices.profile(r)
        timings["voice"] = round((time.perf_counter() - t0) * 1e3, 3)
        f = r.fields
        reading = None if r.source is not None else self._reading(r)
        t1 = time.perf_counter()
        try:
            if r.source is not None:
                engine = self.engine
                if not (can_convert(engine) and isinstance(engine, VoiceConverter)):  # resolve refuses this first
                    raise EngineError(f"the {engine.name} engine cannot convert recordings")
                synth = engine.convert(r.source.pcm, voice, seed=f.seed, speed=f.speed)
                audio, info = synth.audio, dict(synth.info)
            elif on_chunk is not None or (on_piece is not None and self._piecewise(f.text, voice)):
                audio, info = self._stream(r, voice, on_chunk or on_piece, reading)  # type: ignore[arg-type]
            else:
                synth = self.engine.synthesise(
                    f.text, voice, style=f.style, seed=f.seed, speed=f.speed, mode=f.mode, reading=reading
                )
                audio, info = synth.audio, dict(synth.info)
        except TTSError:
            raise
        except Exception as exc:
            # Not _LOGGER.exception: the engine's message may quote the text (log_safe cuts it).
            _LOGGER.error("engine %s failed on key=%s: %s", self.engine.name, r.key, log_safe(exc))
            name = self.engine.name
            raise EngineError(f"the {name} engine failed ({type(exc).__name__}); nothing was cached") from exc
        finally:
            engine_seconds = time.perf_counter() - t1
            self.stats.engine_call(engine_seconds * 1e3)
            self.metrics.engine_calls.inc()
        self.metrics.engine_latency.observe(engine_seconds)
        timings["engine"] = round(engine_seconds * 1e3, 3)
        # Every engine's audio, before it is stored: finite, in range, not silent, and as
        # long as its reading allows (lib.engines.plausible).
        paced = bool(getattr(self.engine, "paced", False))
        pcm = float_to_int16(check_result(audio, self.engine.sample_rate, reading, f.speed, paced=paced))
        meta = self.meta(r, engine_seconds=engine_seconds, info=info)
        return CachedAudio.from_pcm(r.key, pcm, self.engine.sample_rate, meta), timings

    def _reading(self, r: Resolved) -> Reading:
        return self.read(r.fields.text, voice=r.voice_name or None)

    def _stream(
        self, r: Resolved, voice: Any, on_chunk: OnChunk, reading: Reading | None
    ) -> tuple[NDArray[Any], dict[str, Any]]:
        """The engine's stream, passed on chunk by chunk; a chunk with invalid samples
        stops it before it is sent (the whole is checked again before it is stored)."""
        f = r.fields
        parts: list[NDArray[Any]] = []
        chunks = self.engine.stream(
            f.text, voice, style=f.style, seed=f.seed, speed=f.speed, mode=f.mode, reading=reading
        )
        for chunk in chunks:
            part = np.asarray(check_chunk(chunk), dtype=np.float32)
            parts.append(part)
            if part.size:
                on_chunk(float_to_int16(part))
        audio = np.concatenate(parts) if parts else np.zeros(0, dtype=np.float32)
        info: dict[str, Any] = {"chunks": len(parts)}
        if self._piecewise(f.text, voice):
            info["pieces"] = [int(p.size) for p in parts]
        return audio, info

    def _piecewise(self, text: str, voice: Any) -> bool:
        """Whether the engine makes this request in pieces (``piecewise_for``)."""
        decide = getattr(self.engine, "piecewise_for", None)
        return bool(decide(text, voice)) if callable(decide) else False
