"""Synthesis endpoints: ``POST /api/tts`` and ``GET /api/audio/{key}.{ext}`` (the
OpenAI-compatible ``/v1`` is :mod:`lib.api.v1`).

Synthesis runs in the thread pool, off the event loop, so concurrent requests are
served concurrently; identical concurrent misses still cost one engine call because
the service's single-flight sits underneath. The form of ``POST /api/tts`` is
:class:`lib.api.forms.TTSForm`. Memory hits of both endpoints are answered in front of
the router, on the event loop (:mod:`lib.api.fastpath`); what reaches ``POST /api/tts``
goes to a worker thread at once (never a second memory lookup first), and a hit on
``/api/audio`` whose entry is in memory is answered without a thread hop.
"""

from __future__ import annotations

import logging
import re
import time
from typing import Annotated, Any, Literal

from anyio import to_thread
from fastapi import APIRouter, File, Header, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, Field
from starlette.types import Receive

from lib.audio.pcm import MIME_TYPES
from lib.audio.provenance import Label
from lib.cache.entry import CachedAudio
from lib.core.waiting import Caller, waited_by
from lib.errors import NotFoundError, ValidationError
from lib.pipeline.results import SynthesisResult
from lib.pipeline.service import TTSService
from lib.pipeline.streaming import STREAM_FORMATS, encode_stream
from lib.request.types import Resolved, TTSRequest

from .attended import AttendedStream, attended
from .errors import ERROR_RESPONSES
from .forms import TTSForm
from .http import NO_STORE, cache_control, etag_for, etag_matches, parse_range
from .redirect import object_redirect
from .uploads import read_upload

__all__ = [
    "AUDIO_EXTS",
    "answer",
    "answer_bytes",
    "audio_headers",
    "hit_bytes",
    "is_stored",
    "made",
    "not_modified",
    "speech_router",
    "stored_response",
    "stream_label",
    "tts_headers",
    "tts_response",
]

_LOGGER = logging.getLogger(__name__)

AUDIO_EXTS = "wav|mp3|flac|ogg|opus|aac|pcm"
_AUDIO_NAME_RE = re.compile(rf"^([0-9a-fA-F]{{32}})\.({AUDIO_EXTS})$")

_AUDIO_CONTENT = {mime: {"schema": {"type": "string", "format": "binary"}} for mime in MIME_TYPES.values()}
_TTS_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The audio, or with `Accept: application/json` a JSON description of it",
        "content": {
            **_AUDIO_CONTENT,
        },
        "headers": {
            "X-Cache": {
                "description": "HIT, MISS, BYPASS, or COMPOSED (made from a template's cached pieces)",
                "schema": {"type": "string"},
            },
            "X-Segments": {
                "description": "Sentence segments or template pieces it was made of",
                "schema": {"type": "integer"},
            },
            "X-Segments-Reused": {"description": "Of those, found in the cache", "schema": {"type": "integer"}},
            "X-Cache-Key": {"description": "The cache key, 32 hex digits", "schema": {"type": "string"}},
            "X-Take": {
                "description": "approved: the phrase's approved take, answered to a request that names no seed",
                "schema": {"type": "string"},
            },
            "ETag": {"description": "Entity tag of this key in this format", "schema": {"type": "string"}},
        },
    },
    **ERROR_RESPONSES,
}


class TTSResult(BaseModel):
    """``POST /api/tts`` with ``Accept: application/json``."""

    key: str = Field(description="Cache key, 32 hex digits")
    cache: Literal["HIT", "MISS", "BYPASS", "COMPOSED"]
    url: str | None = Field(description="GET this for the audio; null when the result was not stored")
    duration: float = Field(description="Seconds of audio")
    sample_rate: int


_TTS_RESULT_SCHEMA = TTSResult.model_json_schema()
_TTS_RESPONSES[200]["content"]["application/json"] = {"schema": _TTS_RESULT_SCHEMA}


async def made(service: TTSService, request: TTSRequest | Resolved, receive: Receive) -> tuple[SynthesisResult, bytes]:
    """Answer ``request`` (or its resolution) through the service in a worker thread: the
    result and its bytes in the request's format. A client that disconnects meanwhile
    (read from ``receive``, the body already read) stops the work nobody else waits for
    (:mod:`lib.api.attended`)."""

    def work() -> tuple[SynthesisResult, bytes]:
        result = service.synthesise(request)
        return result, answer_bytes(service, result, request.format, request.store)

    return await attended(receive, work)


def speech_router(service: TTSService) -> APIRouter:
    router = APIRouter()
    upload_limit = service.config.prompt.max_upload_bytes

    @router.post(
        "/api/tts",
        tags=["synthesis"],
        summary="Synthesise speech through the cache",
        response_class=Response,
        responses=_TTS_RESPONSES,
    )
    async def tts(
        request: Request,
        # File(): the form may carry an upload, so it is read (and documented) as multipart.
        form: Annotated[TTSForm, File()],
        accept: Annotated[str | None, Header(include_in_schema=False)] = None,
    ) -> Response:
        audio = await read_upload(form.prompt_audio, "prompt_audio", upload_limit)
        if form.stream and form.format not in STREAM_FORMATS:
            raise ValidationError(f"format: {form.format} cannot be streamed; with stream=true use wav, pcm or mp3")
        req = form.request(audio)
        if form.stream:
            caller = Caller()  # leaves when the client disconnects (AttendedStream)
            with waited_by(caller):
                streamed = await to_thread.run_sync(service.stream, req)
            headers = {
                "X-Cache": streamed.cache,
                "X-Cache-Key": streamed.key,
                "X-Sample-Rate": str(streamed.sample_rate),
                "Cache-Control": NO_STORE,  # a stream has no length and no entity tag to revalidate
            }
            if streamed.cache == "HIT" and streamed.result(0).take:  # a hit is whole at once
                headers["X-Take"] = streamed.result(0).take
            return AttendedStream(
                caller,
                encode_stream(streamed.chunks, streamed.sample_rate, form.format, stream_label(service, streamed.key)),
                media_type=STREAM_FORMATS[form.format],
                headers=headers,
            )
        # A form the fast path reads (lib.api.fastpath) is answered there, hit or miss;
        # whatever comes here is answered by the service in a worker thread.
        result, body = await made(service, req, request.receive)
        return await answer(service, result, body, form.format, form.store, accept)

    @router.head("/api/audio/{key}.{ext}", include_in_schema=False)
    @router.get(
        "/api/audio/{key}.{ext}",
        tags=["synthesis"],
        summary="Stored audio by key, in any format",
        response_class=Response,
        responses={
            200: {"description": "The audio", "content": _AUDIO_CONTENT},
            206: {"description": "The requested byte range", "content": _AUDIO_CONTENT},
            302: {"description": "The audio is in the object store: fetch it there (cache.objects_redirect)"},
            304: {"description": "Not modified (If-None-Match)"},
            400: ERROR_RESPONSES[400],
            404: ERROR_RESPONSES[404],
            416: {"description": "Range not satisfiable"},
        },
    )
    async def audio(
        request: Request,
        key: str,
        ext: str,
        if_none_match: Annotated[str | None, Header()] = None,
        range: Annotated[str | None, Header()] = None,
        if_range: Annotated[str | None, Header(include_in_schema=False)] = None,
    ) -> Response:
        match = _AUDIO_NAME_RE.match(f"{key}.{ext}")
        if match is None:
            raise ValidationError(_BAD_AUDIO_NAME)
        key, fmt = match.group(1).lower(), match.group(2)
        # The entry first (from memory, on the event loop, when it is there): its TTL
        # decides how long a client may keep it, and an expired entry is a 404.
        entry = service.cache.memory_entry(key)
        if entry is None:
            entry = await to_thread.run_sync(_stored_entry, service, key)
        unchanged = not_modified(key, fmt, entry, if_none_match)
        if unchanged is not None:
            return unchanged
        redirect = await object_redirect(service, entry, fmt) if request.method == "GET" else None
        if redirect is not None:  # cache.objects_redirect: fetch it from the object store
            return redirect
        ready = service.cache.ready_bytes(key, fmt)
        body = ready if ready is not None else await to_thread.run_sync(service.cache.audio_bytes, entry, fmt)
        etag = etag_for(key, fmt)
        if not range or (if_range and if_range.strip() != etag):
            return stored_response(key, fmt, entry, body)
        headers = audio_headers(key, fmt, entry)
        wanted = parse_range(range, len(body))
        if wanted is False:
            headers["Content-Range"] = f"bytes */{len(body)}"
            return Response(status_code=416, headers=headers)
        if isinstance(wanted, tuple):
            start, end = wanted
            headers["Content-Range"] = f"bytes {start}-{end}/{len(body)}"
            return Response(body[start : end + 1], status_code=206, media_type=MIME_TYPES[fmt], headers=headers)
        return Response(body, media_type=MIME_TYPES[fmt], headers=headers)

    @router.api_route("/api/audio/{rest:path}", methods=["GET", "HEAD"], include_in_schema=False)
    async def audio_bad_name(rest: str) -> Response:
        # Everything under /api/audio/ that is not <32 hex>.<ext>: refused before any lookup.
        raise ValidationError(_BAD_AUDIO_NAME)

    return router


_BAD_AUDIO_NAME = f"audio name must be <32 hex digits>.<{AUDIO_EXTS}>, e.g. /api/audio/<X-Cache-Key>.wav"


# -- the answers, shared with the hit fast path (lib.api.fastpath) -----------------------
# One function per answer, so that a hit answered in front of the router has the very
# headers and bytes the endpoints give.


def is_stored(result: SynthesisResult, store: bool) -> bool:
    """Whether the answer is (or is being) stored under its key: a hit, or a miss that
    asked to be stored."""
    return result.cache == "HIT" or (result.cache == "MISS" and store)


def answer_bytes(service: TTSService, result: SynthesisResult, fmt: str, store: bool) -> bytes:
    """The body of a synthesis or conversion answer in ``fmt`` (a worker thread's job)."""
    if is_stored(result, store):
        return service.cache.audio_bytes(result.audio, fmt)
    # Not stored (bypass, or store=false): encode without keeping a transcode in memory.
    return result.audio.encoded(fmt)


async def answer(
    service: TTSService, result: SynthesisResult, body: bytes, format: str, store: bool, accept: str | None
) -> Response:
    """The answer of ``POST /api/tts`` and ``POST /api/convert``: the audio, or with
    ``Accept: application/json`` where to GET it; the same headers either way."""
    stored = is_stored(result, store)
    headers = tts_headers(result, format, stored)
    if accept and "application/json" in accept:
        if stored:
            # The URL must work from now on, even after a crash: wait for the
            # background write of a new entry to reach the disk (a few ms).
            await to_thread.run_sync(service.cache.wait_written, result.key)
        doc = TTSResult(
            key=result.key, cache=result.cache,  # type: ignore[arg-type]
            url=f"/api/audio/{result.key}.{format}" if stored else None,
            duration=round(result.duration, 4), sample_rate=result.sample_rate,
        )  # fmt: skip
        return JSONResponse(doc.model_dump(), headers=headers)
    return tts_response(body, format, headers)


def tts_headers(result: SynthesisResult, format: str, stored: bool) -> dict[str, str]:
    """The headers of a ``POST /api/tts`` answer (audio or JSON)."""
    headers = {
        "X-Cache": result.cache,
        "X-Cache-Key": result.key,
        "ETag": etag_for(result.key, format),
        "X-Audio-Duration": f"{result.duration:.3f}",
        "X-Sample-Rate": str(result.sample_rate),
        "Cache-Control": cache_control(result.audio.remaining()) if stored else NO_STORE,
    }
    for header, name in (("X-Segments", "segments"), ("X-Segments-Reused", "segments_reused")):
        if name in result.info:
            headers[header] = str(result.info[name])
    if result.take:
        headers["X-Take"] = result.take
    if result.cache == "COMPOSED":
        del headers["ETag"]  # not the audio stored under this key (a refined one may be)
    return headers


def tts_response(body: bytes, format: str, headers: dict[str, str]) -> Response:
    """The audio answer of ``POST /api/tts``."""
    return Response(body, media_type=MIME_TYPES[format], headers=headers)


async def hit_bytes(service: TTSService, result: SynthesisResult, fmt: str) -> bytes:
    """The bytes of a memory hit in ``fmt``: ready in memory, else transcoded (and kept)
    in a worker thread."""
    ready = service.cache.ready_bytes(result.key, fmt)
    if ready is not None:
        return ready
    return await to_thread.run_sync(service.cache.audio_bytes, result.audio, fmt)


def audio_headers(key: str, fmt: str, entry: CachedAudio) -> dict[str, str]:
    """Headers of ``GET /api/audio/{key}.{fmt}`` (200 and 206)."""
    control = cache_control(entry.remaining())
    headers = {"ETag": etag_for(key, fmt), "Cache-Control": control, "Accept-Ranges": "bytes", "X-Cache-Key": key}
    if fmt == "pcm":  # raw samples: the rate is nowhere else
        headers["X-Sample-Rate"] = str(entry.sample_rate)
    return headers


def not_modified(key: str, fmt: str, entry: CachedAudio, if_none_match: str | None) -> Response | None:
    """304 when ``If-None-Match`` names this entity, else None."""
    etag = etag_for(key, fmt)
    if not etag_matches(if_none_match, etag):
        return None
    return Response(status_code=304, headers={"ETag": etag, "Cache-Control": cache_control(entry.remaining())})


def stored_response(key: str, fmt: str, entry: CachedAudio, body: bytes) -> Response:
    """The whole stored audio (200) of ``GET /api/audio/{key}.{fmt}``."""
    return Response(body, media_type=MIME_TYPES[fmt], headers=audio_headers(key, fmt, entry))


def stream_label(service: TTSService, key: str) -> Label | None:
    """The provenance label of an answer streamed while it is made (dated now)."""
    provider = service.config.provenance.active_provider
    return None if provider is None else Label(provider, key, service.tag, time.time())


def _stored_entry(service: TTSService, key: str) -> CachedAudio:
    entry = service.cache.find(key)
    if entry is None:
        raise NotFoundError(f"no stored audio for key {key}; synthesise it first with POST /api/tts")
    return entry
