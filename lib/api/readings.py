"""Readings and the pronunciation lexicon: ``POST /api/reading``, ``GET/POST
/api/lexicon``, ``DELETE /api/lexicon/{term}`` (docs/readings.md).

``POST /api/reading`` (form or JSON) answers what the engine will be given for a text:
``reading`` in the format of ``readings-dev.tsv`` (pinyin with tone numbers, upper-case
letters, lower-case English words, space-separated), ``spoken``, the ``tokens`` with
where each reading came from, and the lexicon's version. Open to every caller, like
synthesis. Listing the lexicon is open too (its entries are what every voice says,
which anyone can hear and read here); adding and deleting entries needs the admin
(:data:`lib.request.access.Action.LEXICON`), and each answer says how many cached entries the
change made stale.
"""

from __future__ import annotations

import json
import logging
from typing import Annotated, Any

from anyio import to_thread
from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.datastructures import UploadFile

from lib.errors import ValidationError
from lib.pipeline.service import TTSService
from lib.text.tokens import Reading

from .admin import CallerDep
from .errors import ERROR_RESPONSES

__all__ = ["ReadingAnswer", "reading_json", "readings_router"]

_LOGGER = logging.getLogger(__name__)

_FIELDS = ("text", "voice", "language")
_ADMIN: dict[int | str, dict[str, Any]] = {
    401: {"description": "Admin token missing", "content": ERROR_RESPONSES[400]["content"]},
    403: {"description": "Admin token wrong, or no token configured and the client is not local"},
}


class ReadingToken(BaseModel):
    text: str = Field(description="The stretch of the (normalised) text this token reads")
    reading: str = Field(description="What is said: pinyin with tone numbers, letters, words, or a pause mark")
    source: str = Field(description="Where the reading came from: lexicon, shipped, rule, model or text")


class ReadingAnswer(BaseModel):
    """``POST /api/reading``."""

    reading: str = Field(description="Space-separated reading units, pauses left out (readings-dev.tsv format)")
    spoken: str = Field(description="The reading as plain text (幺 for a 1 read yao1...)")
    tokens: list[ReadingToken]
    lexicon_version: str = Field(description="The operator lexicon's version (changes with every edit)")


class LexiconEntryModel(BaseModel):
    """One entry of the operator's lexicon."""

    model_config = ConfigDict(extra="forbid")

    term: str = Field(description="The word or name, up to 32 characters", examples=["六安"])
    reading: str = Field(description="Pinyin with tone numbers 1-5 (tone marks accepted), one per character",
                         examples=["lu4 an1"])  # fmt: skip
    voice: str | None = Field(None, description="Only for this voice (a preset or saved voice name); null for all")


_READING_BODY: dict[str, Any] = {
    "requestBody": {
        "required": True,
        "content": {
            media: {
                "schema": {
                    "type": "object",
                    "required": ["text"],
                    "properties": {
                        "text": {"type": "string", "description": "The text to read (normalised as for /api/tts)"},
                        "voice": {"type": "string", "description": "Read as this voice will (voice-scoped entries)"},
                        "language": {"type": "string", "description": "zh or en; left out, detected from the text"},
                    },
                }
            }
            for media in ("application/x-www-form-urlencoded", "multipart/form-data", "application/json")
        },
    }
}


def reading_json(reading: Reading, lexicon_version: str) -> dict[str, Any]:
    """The answer of ``POST /api/reading``."""
    return {
        "reading": reading.reading,
        "spoken": reading.spoken,
        "tokens": [{"text": t.text, "reading": t.reading, "source": t.source} for t in reading.tokens],
        "lexicon_version": lexicon_version,
    }


async def _fields(request: Request) -> dict[str, Any]:
    """``text``, ``voice`` and ``language`` from a form or a JSON object."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind in ("application/x-www-form-urlencoded", "multipart/form-data"):
        form = await request.form()
        found: dict[str, Any] = {}
        for name in _FIELDS:
            value = form.get(name)
            if isinstance(value, UploadFile):
                raise ValidationError(f"{name}: must be a text field, not a file")
            found[name] = value
        return found
    body = await request.body()
    if kind and kind != "application/json" and not kind.endswith("+json"):
        raise ValidationError(
            f"body: send a form (application/x-www-form-urlencoded or multipart/form-data) or a JSON object, not {kind}"
        )
    try:
        data = json.loads(body) if body.strip() else None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ValidationError('body: is not valid JSON; send an object such as {"text": "拨打110"}') from exc
    if not isinstance(data, dict):
        raise ValidationError('body: send a JSON object such as {"text": "拨打110"}, or a form with a text field')
    unknown = sorted(set(data) - set(_FIELDS))
    if unknown:
        raise ValidationError(f"{unknown[0]}: unknown field; the fields are text, voice and language")
    return {name: data.get(name) for name in _FIELDS}


def readings_router(service: TTSService) -> APIRouter:
    router = APIRouter()
    readings = service.readings

    @router.post(
        "/api/reading", tags=["readings"], summary="How a text will be read (pinyin, letters, words)",
        response_model=ReadingAnswer, openapi_extra=_READING_BODY,
        responses={400: ERROR_RESPONSES[400], 404: ERROR_RESPONSES[404]},
    )  # fmt: skip
    async def reading(request: Request) -> dict[str, Any]:
        fields = await _fields(request)
        if fields["text"] is None:
            raise ValidationError("text: is required; give the text to read")
        found = await to_thread.run_sync(
            lambda: readings.preview(fields["text"], voice=fields["voice"], language=fields["language"])
        )
        return reading_json(found, readings.version)

    @router.get("/api/lexicon", tags=["readings"], summary="The operator's lexicon entries")
    async def list_entries() -> dict[str, Any]:
        entries = await to_thread.run_sync(readings.entries)
        return {"entries": entries, "count": len(entries), "limit": readings.lexicon.limit,
                "lexicon_version": readings.version}  # fmt: skip

    @router.post(
        "/api/lexicon", tags=["readings", "admin"], summary="Add or replace a lexicon entry (admin)",
        responses={
            400: ERROR_RESPONSES[400],
            422: {"description": "The entry is invalid (the message names it), or the lexicon is full"},
            503: {"description": "The lexicon file or the shared tier cannot take it; nothing changed"},
            **_ADMIN,
        },
    )  # fmt: skip
    async def add_entry(caller: CallerDep, entry: LexiconEntryModel) -> dict[str, Any]:
        edit = await to_thread.run_sync(lambda: readings.add(entry.term, entry.reading, entry.voice, caller=caller))
        return dict(edit)

    @router.delete(
        "/api/lexicon/{term:path}", tags=["readings", "admin"], summary="Delete a lexicon entry (admin)",
        responses={404: ERROR_RESPONSES[404], **_ADMIN},
    )  # fmt: skip
    async def delete_entry(
        term: str,
        caller: CallerDep,
        voice: Annotated[str | None, Query(description="Delete the entry scoped to this voice")] = None,
    ) -> dict[str, Any]:
        return dict(await to_thread.run_sync(lambda: readings.remove(term, voice, caller=caller)))

    return router
