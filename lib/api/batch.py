"""Batch jobs over HTTP (docs/batch.md), made in the background by every replica
(:mod:`lib.batch.jobs`).

- ``POST /api/batch`` (admin): ``{"id": optional, "items": [{"text", "voice", "style",
  "seed", "format"}, ...]}`` (an item may also give ``speed`` and ``mode``, as a phrase list
  does), 1..1000 items; answers 202 ``{"id", "status_url", "total"}``
  (the same id again: 200, the same job, no new work). A body or item that does not fit
  the schema is 422, more than 1000 items 413; an item whose content ``POST /api/tts``
  would refuse (an unknown voice, a seed out of range, an empty text) fails alone with
  its error while the others are made;
- ``GET /api/batch/{id}``: ``{"id", "status", "total", "done", "failed", "items": [{"index",
  "key", "url", "cache", "error"}]}``;
- ``DELETE /api/batch/{id}`` (admin): cancels (items not started are dropped);
- ``GET /api/batch``: the newest jobs without their items (``{"jobs": [...]}``).
"""

from __future__ import annotations

import json
from typing import Any

from anyio import to_thread
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict
from pydantic import ValidationError as PydanticError

from lib.batch.board import JobSummary, JobView
from lib.batch.jobs import ID_PATTERN, MAX_ITEMS, BatchJobs, ItemSpec
from lib.errors import PayloadTooLargeError, ValidationError
from lib.pipeline.service import TTSService

from .admin import ADMIN_RESPONSES, CallerDep
from .errors import ERROR_RESPONSES, validation_message
from .forms import TTSForm

__all__ = ["BatchBody", "BatchItem", "batch_router"]

#: Largest body of POST /api/batch: 1000 items of long texts and styles.
MAX_BODY = 16 * 1024**2


class MalformedJobError(ValidationError):
    """The body of ``POST /api/batch`` does not fit its schema (HTTP 422)."""

    http_status = 422


class BatchItem(BaseModel):
    """One item's schema (types only; its content is checked as ``POST /api/tts``'s)."""

    model_config = ConfigDict(extra="forbid")

    text: str
    voice: str | None = None
    style: str = ""
    seed: int | None = None
    format: str = "wav"
    speed: float | None = None
    mode: str | None = None


class BatchBody(BaseModel):
    """``POST /api/batch``."""

    model_config = ConfigDict(extra="forbid")

    id: str | None = None
    items: list[BatchItem]


def batch_router(service: TTSService) -> APIRouter:
    router = APIRouter()
    jobs = BatchJobs.of(service)

    @router.post(
        "/api/batch", tags=["batch", "admin"], status_code=202, summary="Submit a batch job (a list of requests)",
        openapi_extra={"requestBody": {"content": {"application/json": {"schema": BatchBody.model_json_schema()}}}},
        responses={
            200: {"description": "A job of this id exists: the same job, no new work"},
            413: {"description": f"More than {MAX_ITEMS} items", "content": ERROR_RESPONSES[413]["content"]},
            422: {"description": "The body or an item does not fit the schema",
                  "content": ERROR_RESPONSES[422]["content"]},
            **ADMIN_RESPONSES,
        },
    )  # fmt: skip
    async def submit(request: Request, caller: CallerDep) -> JSONResponse:
        job_id, specs = _specs(await _body(request))
        summary, created = await to_thread.run_sync(lambda: jobs.submit(specs, job_id=job_id, caller=caller))
        body = {"id": summary["id"], "status_url": f"/api/batch/{summary['id']}", "total": summary["total"]}
        return JSONResponse(body, status_code=202 if created else 200)

    @router.get("/api/batch", tags=["batch"], summary="The newest batch jobs and their progress")
    async def listing() -> dict[str, list[JobSummary]]:
        return {"jobs": await to_thread.run_sync(jobs.listing)}

    @router.get(
        "/api/batch/{job_id}", tags=["batch"], summary="A batch job's status and items",
        responses={404: ERROR_RESPONSES[404]},
    )  # fmt: skip
    async def status(job_id: str) -> JobView:
        return await to_thread.run_sync(lambda: jobs.status(job_id))

    @router.delete(
        "/api/batch/{job_id}", tags=["batch", "admin"], summary="Cancel a batch job (items not started are dropped)",
        responses={404: ERROR_RESPONSES[404], **ADMIN_RESPONSES},
    )  # fmt: skip
    async def cancel(job_id: str, caller: CallerDep) -> JobView:
        return await to_thread.run_sync(lambda: jobs.cancel(job_id, caller=caller))

    return router


async def _body(request: Request) -> dict[str, Any]:
    """The decoded JSON object of the body (422 if it is none, 413 if too large)."""
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY:
            raise PayloadTooLargeError(f"body: over {MAX_BODY // 1024**2} MiB; split the list into several jobs")
    try:
        doc = json.loads(bytes(raw) or b"null")
    except ValueError:
        raise MalformedJobError('body: is not valid JSON; send {"items": [{"text": ..., "voice": ...}, ...]}') from None
    if not isinstance(doc, dict):
        raise MalformedJobError('body: send a JSON object, {"id": optional, "items": [...]}')
    items = doc.get("items")
    if isinstance(items, list) and len(items) > MAX_ITEMS:
        raise PayloadTooLargeError(f"items: {len(items)} items; a job holds at most {MAX_ITEMS}: split the list")
    return doc


def _schema_message(errors: list[Any]) -> str:
    """Schema errors naming the place in the body, e.g. ``items[3].text: Input should be a valid string``."""
    parts = []
    for err in errors[:5]:
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in err.get("loc", ())).lstrip(".")
        msg = "is required" if err.get("type") == "missing" else str(err.get("msg", "is invalid"))
        parts.append(f"{where or 'body'}: {msg}")
    return "; ".join(parts) + ' (send {"id": optional, "items": [{"text", "voice", "style", "seed", "format"}, ...]})'


def _specs(doc: dict[str, Any]) -> tuple[str | None, list[ItemSpec]]:
    """The job's id and its items: an item whose content ``POST /api/tts`` refuses
    becomes a failed item with that error; a schema error refuses the job (422)."""
    try:
        body = BatchBody.model_validate(doc)
    except PydanticError as exc:
        raise MalformedJobError(_schema_message(list(exc.errors()))) from None
    if not body.items:
        raise MalformedJobError(f"items: give 1 to {MAX_ITEMS} items")
    if body.id is not None and not ID_PATTERN.fullmatch(body.id):
        raise MalformedJobError(f"id: {body.id[:80]!r} is not a job id; use 1-64 of A-Z a-z 0-9 . _ - (or none)")
    specs: list[ItemSpec] = []
    for item in body.items:
        fields = item.model_dump()
        try:
            TTSForm.model_validate({k: v for k, v in fields.items() if v is not None})  # POST /api/tts's checks
        except PydanticError as exc:
            specs.append(ItemSpec(fields, validation_message(list(exc.errors()))[0]))
            continue
        specs.append(ItemSpec(fields))
    return body.id, specs
