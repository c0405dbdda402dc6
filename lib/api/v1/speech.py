"""``POST /v1/audio/speech``: OpenAI's text to speech, answered through the cache.

What OpenAI documents, as its clients send it: ``response_format`` ``mp3`` (default),
``opus`` (Ogg), ``aac`` (ADTS), ``flac``, ``wav`` and ``pcm`` (raw 16-bit little-endian
mono at 24 kHz, resampled from the entry), plus ``ogg`` (Vorbis) as on ``/api``; OpenAI's
voice names through ``openai.voices`` (:mod:`lib.config.voicemap`), a ``{"id": ...}`` voice
object naming a preset or saved voice; ``speed`` 0.25-4.0; ``instructions`` (the style);
``stream_format`` ``audio`` (the file) or ``sse`` (:mod:`.sse`). The body is chosen by
``stream_format`` alone, never by ``Accept`` (the openai SDK sends
``Accept: application/octet-stream`` for both). ``model`` is accepted and ignored: the
configured engine answers (``GET /v1/models``). Extras: ``seed``, and ``style`` as
another name for ``instructions``.

Every answer is a transcode of the one stored entry, kept in memory once made; a hit
from memory is answered on the event loop when its bytes are ready.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Literal

from anyio import to_thread
from fastapi import APIRouter, Request
from fastapi.responses import Response
from pydantic import BaseModel, ConfigDict, Field

from lib.audio.encoders import OPENAI_PCM_RATE, opus_rate
from lib.audio.pcm import MIME_TYPES
from lib.audio.provenance import Label
from lib.core.logtext import cut_text
from lib.core.waiting import Caller, waited_by
from lib.errors import NotFoundError, TTSError, ValidationError
from lib.pipeline.results import SynthesisResult
from lib.pipeline.service import TTSService
from lib.pipeline.streaming import StreamAnswer, encode_stream
from lib.request.types import Resolved, TTSRequest
from lib.request.validate import check_unicode

from ..attended import AttendedStream, attended
from ..forms import Seed, Speed
from ..http import NO_STORE, cache_control, etag_for
from . import sse

__all__ = ["SpeechRequest", "VoiceRef", "speech_router"]

_LOGGER = logging.getLogger(__name__)

ResponseFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm", "ogg"]
#: Formats an SSE answer streams chunk by chunk while a miss is made; the others come as
#: one file once it is whole (an Ogg, AAC or MP3 file made in pieces would not be the
#: same bytes as the one stored for the key).
_SSE_CHUNKED = frozenset({"pcm24k", "wav"})
_MEDIA = {**MIME_TYPES, "pcm24k": MIME_TYPES["pcm"]}
#: An event stream is never stored by a proxy, nor held back by one (nginx: X-Accel-Buffering).
_SSE_HEADERS = {"Cache-Control": NO_STORE, "X-Accel-Buffering": "no"}


class VoiceRef(BaseModel):
    """A custom voice object: ``{"id": "<a saved or preset voice>"}``."""

    model_config = ConfigDict(extra="ignore")
    id: str


class SpeechRequest(BaseModel):
    """OpenAI's ``audio.speech.create`` body, plus ``style`` and ``seed``."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field("tts-1", description="Accepted for compatibility; the configured engine answers")
    input: str = Field(description="The text to speak")
    voice: str | VoiceRef = Field(
        description="An OpenAI voice name (mapped by openai.voices), a preset or saved voice name, or {'id': name}"
    )
    response_format: ResponseFormat = Field(
        "mp3", description="pcm is raw 16-bit little-endian mono at 24 kHz; opus is Ogg Opus; aac is ADTS"
    )
    speed: Speed = 1.0
    instructions: str | None = Field(None, description="Style instruction, up to text.max_style_chars (4096)")
    style: str | None = Field(None, description="Another name for instructions")
    seed: Seed | None = Field(None, description="Omit for the phrase's approved take (if any), else seed 0")
    stream_format: Literal["audio", "sse"] = Field(
        "audio", description="audio: the file; sse: speech.audio.delta events, then speech.audio.done"
    )


def speech_router(service: TTSService) -> APIRouter:
    router = APIRouter()
    table = {k.lower(): v for k, v in service.config.openai.table(service.engine.name).items()}

    @router.post(
        "/v1/audio/speech",
        tags=["openai"],
        summary="OpenAI-compatible text to speech (audio or server-sent events)",
        response_class=Response,
        responses={
            200: {
                "description": "The audio, or with stream_format sse an event stream",
                "content": {
                    **{mime: {"schema": {"type": "string", "format": "binary"}} for mime in MIME_TYPES.values()},
                    "text/event-stream": {"schema": {"type": "string"}},
                },
            },
            400: {"description": "Invalid request (OpenAI error object)"},
            503: {"description": "Engine not available (OpenAI error object)"},
        },
    )
    async def openai_speech(body: SpeechRequest, request: Request) -> Response:
        for name in ("input", "style", "instructions"):  # named as this endpoint's callers know them
            check_unicode(getattr(body, name), name)
        voice, alias = _voice(body.voice, table)
        if not voice:
            raise ValidationError("voice: is empty; give an OpenAI voice name (alloy, nova...) or a saved voice")
        fmt = "pcm" if body.response_format == "pcm" else body.response_format
        req = TTSRequest(
            text=body.input, voice=voice, style=body.style or body.instructions or "",
            seed=body.seed, speed=body.speed, format=fmt,
        )  # fmt: skip
        answers = _Answers(service, alias, voice)
        enc = "pcm24k" if body.response_format == "pcm" else body.response_format
        if body.stream_format == "sse":
            return await answers.events(req, enc, body.input, body.instructions or body.style or "", request)
        lookup = service.memory_lookup(req)  # a hit from memory: no thread hop when its bytes are ready
        hit = lookup.result
        if hit is None:  # made from the resolution memory made, when it made one: resolved once
            result, audio = await attended(request.receive, answers.made, lookup.resolved or req, enc)
        else:
            ready = service.cache.ready_bytes(hit.key, enc)
            result, audio = hit, ready if ready is not None else await to_thread.run_sync(answers.audio, hit, enc)
        return Response(audio, media_type=_MEDIA[enc], headers=_headers(result, enc))

    return router


def _voice(voice: str | VoiceRef, table: dict[str, str]) -> tuple[str, str | None]:
    """The voice to speak in, and the OpenAI name it was mapped from (if it was)."""
    if isinstance(voice, VoiceRef):
        return voice.id.strip(), None  # a voice object names this server's voice itself
    name = voice.strip()
    mapped = table.get(name.lower())
    return (mapped, name) if mapped is not None else (name, None)


def _rate(result: SynthesisResult, enc: str) -> int:
    if enc == "pcm24k":
        return OPENAI_PCM_RATE
    if enc == "opus":
        return opus_rate(result.sample_rate)
    return result.sample_rate


def _headers(result: SynthesisResult, enc: str) -> dict[str, str]:
    headers = {
        "X-Cache": result.cache,
        "X-Cache-Key": result.key,
        "ETag": etag_for(result.key, enc),
        "X-Sample-Rate": str(_rate(result, enc)),
        "X-Audio-Duration": f"{result.duration:.3f}",
        "Cache-Control": cache_control(result.audio.remaining()),
    }
    if result.take:
        headers["X-Take"] = result.take
    if result.cache == "COMPOSED":  # made from a template's pieces, not stored under its key
        headers["Cache-Control"] = NO_STORE
        del headers["ETag"]
    return headers


class _Answers:
    """The service calls of one request (the only ones this module makes)."""

    def __init__(self, service: TTSService, alias: str | None, voice: str) -> None:
        self.service = service
        self.alias = alias
        self.voice = voice

    def audio(self, result: SynthesisResult, enc: str) -> bytes:
        """The answer's bytes: the stored entry's transcode (kept), else made for it alone."""
        if result.cache == "HIT" or result.cache == "MISS":  # v1 always stores
            return self.service.cache.audio_bytes(result.audio, enc)
        return result.audio.encoded(enc)

    def made(self, req: TTSRequest | Resolved, enc: str) -> tuple[SynthesisResult, bytes]:
        with self._unaliased():
            result = self.service.synthesise(req)
        return result, self.audio(result, enc)

    def stream(self, req: TTSRequest | Resolved) -> StreamAnswer:
        with self._unaliased():
            return self.service.stream(req)

    @contextmanager
    def _unaliased(self) -> Iterator[None]:
        """An unknown voice that an OpenAI name was mapped to is the mapping's fault: say so."""
        try:
            yield
        except NotFoundError as exc:
            if self.alias is None:
                raise
            raise ValidationError(
                f"voice: {cut_text(self.alias)} is spoken in {cut_text(self.voice)!r} (openai.voices), which is no "
                f"preset or saved voice here; set openai.voices.{cut_text(self.alias)} to one (GET /v1/audio/voices)"
            ) from exc

    async def events(self, req: TTSRequest, enc: str, text: str, instructions: str, request: Request) -> Response:
        """The SSE answer: a hit (or a composed answer) whole at once, a miss as it is
        made (for a caller who leaves when the client disconnects: lib.api.attended)."""
        lookup = self.service.memory_lookup(req)
        result = lookup.result
        if result is None:
            # Errors before the first event are HTTP errors (status and OpenAI's error object).
            caller = Caller()
            with waited_by(caller):
                streamed = await to_thread.run_sync(self.stream, lookup.resolved or req)
            if streamed.cache not in ("HIT", "COMPOSED"):
                return self._streaming(streamed, enc, text, instructions, caller)
            result = streamed.result()
        audio = self.service.cache.ready_bytes(result.key, enc)
        if audio is None:
            audio = await to_thread.run_sync(self.audio, result, enc)
        usage = sse.usage(text, instructions, result.duration)
        body = b"".join([*sse.split([audio]), sse.done(usage, result.cache, result.key)])
        headers = _SSE_HEADERS | {"X-Cache": result.cache, "X-Cache-Key": result.key}
        if result.take:
            headers["X-Take"] = result.take
        headers["X-Sample-Rate"] = str(_rate(result, enc))
        return Response(body, media_type="text/event-stream", headers=headers)

    def _streaming(
        self, streamed: StreamAnswer, enc: str, text: str, instructions: str, caller: Caller
    ) -> AttendedStream:
        rate = OPENAI_PCM_RATE if enc == "pcm24k" else streamed.sample_rate
        headers = _SSE_HEADERS | {"X-Cache": streamed.cache, "X-Cache-Key": streamed.key, "X-Sample-Rate": str(rate)}
        events = self._streamed(streamed, enc, text, instructions)
        return AttendedStream(caller, events, media_type="text/event-stream", headers=headers)

    def _streamed(self, streamed: StreamAnswer, enc: str, text: str, instructions: str) -> Iterator[bytes]:
        """Events of a miss being made (Starlette runs this in its thread pool)."""
        try:
            if enc in _SSE_CHUNKED:
                provider = self.service.config.provenance.active_provider
                label = Label(provider, streamed.key, self.service.tag, time.time()) if provider else None
                yield from sse.split(encode_stream(streamed.chunks, streamed.sample_rate, enc, label))
                result = streamed.result()
            else:
                for _ in streamed.chunks:  # made in its own thread; wait for the whole
                    pass
                result = streamed.result()
                yield from sse.split([self.audio(result, enc)])
            yield sse.done(sse.usage(text, instructions, result.duration), result.cache, result.key)
        except TTSError as exc:
            kind = "invalid_request_error" if exc.http_status < 500 else "server_error"
            yield sse.error(str(exc), kind)
        except Exception as exc:
            _LOGGER.error("speech stream %s failed: %s", streamed.key, type(exc).__name__)
            yield sse.error("internal error; the server log has the details")
