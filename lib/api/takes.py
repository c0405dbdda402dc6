"""Approved takes over HTTP (docs/takes.md).

- ``POST /api/takes``: the fields of ``POST /api/tts`` (multipart, urlencoded or JSON)
  plus ``n`` (default 3, at most 8) or ``seeds``: renders the takes, each an ordinary
  cache entry, and answers ``{"takes": [{"seed", "key", "url", "duration"}, ...]}``;
- ``POST /api/takes/approve`` (form or JSON field ``key``; optional ``who``): makes that
  take its phrase's approved take (admin);
- ``DELETE /api/takes/approved/{key}``: withdraws it (admin);
- ``GET /api/takes/approved``: every approval, ``needs_review`` when its model version
  is not the serving one.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from anyio import to_thread
from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as PydanticError

from lib.errors import ValidationError
from lib.pipeline.service import TTSService
from lib.takes.operations import DEFAULT_TAKES, MAX_TAKES, ApprovalRow
from lib.takes.records import Approval

from .admin import ADMIN_RESPONSES, CallerDep
from .errors import ERROR_RESPONSES, validation_message
from .forms import TTSForm
from .uploads import read_upload

__all__ = ["TakesForm", "takes_router"]

_LOGGER = logging.getLogger(__name__)

#: A JSON or urlencoded body of POST /api/takes or /api/takes/approve larger than this is refused.
_MAX_JSON = 64 * 1024


class TakesForm(TTSForm):
    """``POST /api/takes``: the fields of ``POST /api/tts`` (``seed``: the first seed of
    the takes, default 0), and how many takes or which seeds."""

    n: int | None = Field(None, description=f"How many takes (default {DEFAULT_TAKES}, at most {MAX_TAKES})")
    seeds: list[int] | None = Field(None, description="The seeds of the takes (distinct), instead of n")


class ApproveForm(BaseModel):
    """``POST /api/takes/approve``."""

    model_config = ConfigDict(extra="ignore")

    key: str = Field(description="The take's key (a key of POST /api/takes)")
    who: str = Field("", max_length=64, description="Who approves (recorded); default: the caller")


def takes_router(service: TTSService) -> APIRouter:
    router = APIRouter()
    upload_limit = service.config.prompt.max_upload_bytes

    @router.post(
        "/api/takes", tags=["takes"], summary="Render a phrase's takes under distinct seeds",
        openapi_extra={"requestBody": {"content": {
            "multipart/form-data": {"schema": TakesForm.model_json_schema()},
            "application/json": {"schema": TakesForm.model_json_schema()},
        }}},
        responses={**ERROR_RESPONSES, 422: {"description": "n or seeds out of range, or unusable prompt audio"}},
    )  # fmt: skip
    async def render(request: Request) -> dict[str, Any]:
        fields, audio = await _fields(request, upload_limit)
        try:
            form = TakesForm.model_validate(fields)
        except PydanticError as exc:
            raise ValidationError(validation_message(list(exc.errors()))[0]) from None
        if form.stream:
            raise ValidationError("stream: takes are answered as a list of keys; leave stream off")
        req = form.request(audio)

        def work() -> list[dict[str, Any]]:
            made = service.takes.render(req, service.resolve, service.synthesise, n=form.n, seeds=form.seeds)
            out = []
            for take in made:
                service.cache.wait_written(take.key)  # its URL must work from now on
                url = f"/api/audio/{take.key}.{form.format}"
                out.append({"seed": take.seed, "key": take.key, "url": url, "duration": take.duration})
            return out

        return {"takes": await to_thread.run_sync(work)}

    @router.post(
        "/api/takes/approve", tags=["takes", "admin"], summary="Approve a take: its phrase's unseeded requests get it",
        responses={**ERROR_RESPONSES, **ADMIN_RESPONSES},
    )  # fmt: skip
    async def approve(request: Request, caller: CallerDep) -> dict[str, Any]:
        fields, _ = await _fields(request, 0)
        try:
            form = ApproveForm.model_validate(fields)
        except PydanticError as exc:
            raise ValidationError(validation_message(list(exc.errors()))[0]) from None
        approval = await to_thread.run_sync(lambda: service.takes.approve(form.key, caller=caller, who=form.who))
        return {"approved": _row(service, approval)}

    @router.delete(
        "/api/takes/approved/{key}", tags=["takes", "admin"], summary="Withdraw an approved take",
        responses={400: ERROR_RESPONSES[400], 404: ERROR_RESPONSES[404], **ADMIN_RESPONSES},
    )  # fmt: skip
    async def withdraw(key: str, caller: CallerDep) -> dict[str, Any]:
        approval = await to_thread.run_sync(lambda: service.takes.withdraw(key, caller=caller))
        return {"withdrawn": _row(service, approval)}

    @router.get("/api/takes/approved", tags=["takes"], summary="Every approved take (needs_review after an upgrade)")
    async def approved() -> dict[str, Any]:
        return {"model_version": service.engine.model_version, "approvals": service.takes.listing()}

    return router


def _row(service: TTSService, approval: Approval) -> ApprovalRow | dict[str, Any]:
    for row in service.takes.listing():
        if row["key"] == approval.key:
            return row
    return {"key": approval.key, "seed": approval.seed, "phrase": approval.text, "voice": approval.voice}


async def _fields(request: Request, upload_limit: int) -> tuple[dict[str, Any], bytes | None]:
    """The body's fields (JSON object, multipart or urlencoded form) and the bytes of
    the ``prompt_audio`` upload, if any (``upload_limit``: 0 refuses one). As FastAPI
    reads a form, an empty field is absent; ``seeds`` may repeat or be comma-separated."""
    kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if kind == "application/json":
        raw = await request.body()
        if len(raw) > _MAX_JSON:
            raise ValidationError(f"body: over {_MAX_JSON} bytes of JSON; send the fields only")
        try:
            doc = json.loads(raw or b"{}")
        except ValueError:
            raise ValidationError("body: is not valid JSON; send a JSON object as documented (see /docs)") from None
        if not isinstance(doc, dict):
            raise ValidationError('body: send a JSON object of fields, e.g. {"text": ..., "voice": ...}')
        return doc, None
    if kind not in ("multipart/form-data", "application/x-www-form-urlencoded"):
        raise ValidationError("body: send multipart/form-data, application/x-www-form-urlencoded or JSON")
    fields: dict[str, Any] = {}
    seeds: list[str] = []
    audio: bytes | None = None
    async with request.form() as form:
        for name, value in form.multi_items():
            if not isinstance(value, str):
                if name == "prompt_audio" and upload_limit:
                    audio = await read_upload(value, "prompt_audio", upload_limit)
                elif value.size or value.filename:
                    raise ValidationError(f"{name}: a file was sent where text belongs")
            elif name == "seeds":
                seeds += [part.strip() for part in value.split(",") if part.strip()]
            elif value:
                fields[name] = value
    if seeds:
        fields["seeds"] = seeds
    return fields, audio
