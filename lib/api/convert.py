"""``POST /api/convert``: convert mode (speech to speech). The words of an uploaded
recording, spoken in another voice (an uploaded prompt, or a saved or preset voice),
through the same cache, single-flight, headers, errors and limits as ``/api/tts``."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from anyio import to_thread
from fastapi import APIRouter, File, Form, Header, UploadFile
from fastapi.responses import Response

from lib.audio import MIME_TYPES
from lib.errors import ValidationError
from lib.request import ConvertRequest
from lib.service import TTSService
from lib.validate import MAX_SEED, MAX_SPEED, MAX_TTL, MIN_SPEED

from .errors import ERROR_RESPONSES
from .speech import answer, answer_bytes
from .uploads import read_upload

__all__ = ["convert_router"]

Format = Literal["wav", "mp3", "flac", "ogg", "opus", "aac", "pcm"]

_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The converted audio, or with `Accept: application/json` a JSON description of it",
        "content": {mime: {"schema": {"type": "string", "format": "binary"}} for mime in MIME_TYPES.values()},
    },
    **ERROR_RESPONSES,
}


def convert_router(service: TTSService) -> APIRouter:
    router = APIRouter()
    limit = service.config.prompt.max_upload_bytes

    @router.post(
        "/api/convert", tags=["synthesis"], summary="Convert a recording into another voice (speech to speech)",
        response_class=Response, responses=_RESPONSES,
    )  # fmt: skip
    async def convert(
        source_audio: Annotated[UploadFile, File(description="The recording whose words are spoken, 1-30 s")],
        prompt_audio: Annotated[UploadFile | None, File(description="The target voice, as a recording")] = None,
        voice: Annotated[str | None, Form(description="The target voice: a saved or preset voice name")] = None,
        seed: Annotated[int, Form(ge=0, le=MAX_SEED)] = 0,
        speed: Annotated[float, Form(ge=MIN_SPEED, le=MAX_SPEED)] = 1.0,
        format: Annotated[Format, Form()] = "wav",
        cache: Annotated[bool, Form(description="false bypasses the cache (no read, no write)")] = True,
        store: Annotated[bool, Form(description="false never writes the result (personal data)")] = True,
        ttl: Annotated[
            float | None, Form(gt=0, le=MAX_TTL, allow_inf_nan=False, description="Seconds this entry lives")
        ] = None,
        accept: Annotated[str | None, Header(include_in_schema=False)] = None,
    ) -> Response:
        source = await read_upload(source_audio, "source_audio", limit)
        if source is None:
            raise ValidationError("source_audio: upload the recording to convert")
        target = await read_upload(prompt_audio, "prompt_audio", limit)
        request = ConvertRequest(
            source_audio=source, prompt_audio=target, voice=voice or None, seed=seed, speed=speed,
            format=format, use_cache=cache, store=store, ttl=ttl,
        )  # fmt: skip

        def work() -> tuple[Any, bytes]:
            result = service.convert(request)
            return result, answer_bytes(service, result, format, store)

        result, body = await to_thread.run_sync(work)
        return await answer(service, result, body, format, store, accept)

    return router
