"""``POST /api/convert``: convert mode (speech to speech). The words of an uploaded
recording, spoken in another voice (an uploaded prompt, or a saved or preset voice),
through the same cache, single-flight, headers, errors and limits as ``/api/tts``."""

from __future__ import annotations

from typing import Annotated, Any

from anyio import to_thread
from fastapi import APIRouter, File, Header
from fastapi.responses import Response

from lib.audio.pcm import MIME_TYPES
from lib.errors import ValidationError
from lib.pipeline.service import TTSService

from .errors import ERROR_RESPONSES
from .forms import ConvertForm
from .speech import answer, answer_bytes
from .uploads import read_upload

__all__ = ["convert_router"]

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
        form: Annotated[ConvertForm, File()],
        accept: Annotated[str | None, Header(include_in_schema=False)] = None,
    ) -> Response:
        source = await read_upload(form.source_audio, "source_audio", limit)
        if source is None:
            raise ValidationError("source_audio: upload the recording to convert")
        target = await read_upload(form.prompt_audio, "prompt_audio", limit)
        request = form.request(source, target)
        format, store = form.format, form.store

        def work() -> tuple[Any, bytes]:
            result = service.convert(request)
            return result, answer_bytes(service, result, format, store)

        result, body = await to_thread.run_sync(work)
        return await answer(service, result, body, format, store, accept)

    return router
