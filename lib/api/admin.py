"""Voices, cache statistics and administration, metrics and health.

Who may do what is decided by the service (:mod:`lib.request.access`); this module only tells
it who is calling: the bearer token (``Authorization: Bearer <token>``) and the client
address. The token comes from the environment variable named by
``server.admin_token_env`` (default ``TTS_ADMIN_TOKEN``), never from a file in the
repository. With no token configured, admin actions are served to loopback clients
only: behind a reverse proxy on the same host every client looks local, so set a token.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any

from anyio import to_thread
from fastapi import APIRouter, Depends, File, Form, Request, UploadFile
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

from lib.batch.background import BackgroundPreload, PreloadStatus
from lib.batch.preload import make_missing
from lib.core.logtext import cut_fields, cut_text
from lib.core.metrics import CONTENT_TYPE
from lib.core.reports import ClearReport, EvictReport, SweepReport
from lib.errors import EngineUnavailableError, ValidationError
from lib.pipeline.service import TTSService
from lib.request.access import AccessPolicy, Caller

from .errors import ERROR_RESPONSES
from .uploads import read_upload

__all__ = ["ADMIN_RESPONSES", "CallerDep", "ClearRequest", "admin_router", "preload_router", "request_caller"]

_LOGGER = logging.getLogger(__name__)

_bearer = HTTPBearer(auto_error=False, description="The admin token (environment variable TTS_ADMIN_TOKEN)")
ADMIN_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"description": "Admin token missing", "content": ERROR_RESPONSES[400]["content"]},
    403: {"description": "Admin token wrong, or no token configured and the client is not local"},
}
_CONFLICT: dict[str, Any] = {"description": "A voice is saved under this name (send replace=true as the admin)"}


class ClearRequest(BaseModel):
    """Body of ``POST /api/cache/clear``; no body clears everything."""

    model_config = ConfigDict(extra="forbid")

    tag: str | None = Field(
        None, max_length=200, description="Evict one tag only: engine:model_version, or voice:<fingerprint>"
    )
    expired_only: bool = Field(False, description="Remove expired entries only")
    drop_approved: bool = Field(
        False, description="Clearing everything: drop the approved takes too (withdrawn); without it they are kept"
    )


async def request_caller(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> Caller:
    """A FastAPI dependency: who sent this request (its bearer token, if any, and its
    address), as the service's access policy sees it."""
    token = credentials.credentials if credentials is not None else None
    # A bare token (or another scheme) is never compared with the admin token: only
    # "Bearer <token>" is, and a refusal tells the client to add "Bearer ".
    bad_scheme = token is None and bool(request.headers.get("authorization", "").strip())
    host = request.client.host if request.client else None
    policy: AccessPolicy = request.app.state.service.access
    return policy.caller(origin="http", client_host=host, token=token, bad_scheme=bad_scheme)


CallerDep = Annotated[Caller, Depends(request_caller)]


def admin_router(service: TTSService) -> APIRouter:
    router = APIRouter()
    upload_limit = service.config.prompt.max_upload_bytes

    @router.get("/api/voices", tags=["voices"], summary="Saved and preset voices")
    async def list_voices(caller: CallerDep) -> dict[str, Any]:
        return {"voices": await to_thread.run_sync(lambda: service.voices.list(caller=caller))}

    @router.post(
        "/api/voices", tags=["voices"], summary="Save a prompt as a named voice", status_code=201,
        responses={**{k: v for k, v in ERROR_RESPONSES.items() if k != 503}, 409: _CONFLICT, **ADMIN_RESPONSES},
    )  # fmt: skip
    async def save_voice(
        caller: CallerDep,
        name: Annotated[str, Form(description="1-64 letters, digits, spaces, '.', '-' or '_'")],
        prompt_audio: Annotated[UploadFile, File(description="Prompt voice recording, 1-30 s")],
        prompt_text: Annotated[str, Form(description="Transcript of the prompt, for zero-shot cloning")] = "",
        replace: Annotated[
            bool, Form(description="Replace the voice saved under this name (admin); without it a taken name is 409")
        ] = False,
    ) -> dict[str, Any]:
        audio = await read_upload(prompt_audio, "prompt_audio", upload_limit)
        if audio is None:
            raise ValidationError("prompt_audio: upload the recording of the voice to save")
        saved = await to_thread.run_sync(
            lambda: service.voices.save(name, audio, prompt_text, replace=replace, caller=caller)
        )
        _LOGGER.info("voice saved: %s", cut_text(name))
        return {"voice": saved}

    @router.delete(
        "/api/voices/{name}", tags=["voices", "admin"], summary="Delete a saved voice (admin)",
        responses={404: ERROR_RESPONSES[404], **ADMIN_RESPONSES},
    )  # fmt: skip
    async def delete_voice(name: str, caller: CallerDep) -> dict[str, Any]:
        await to_thread.run_sync(lambda: service.voices.delete(name, caller=caller))
        _LOGGER.info("voice deleted: %s", cut_text(name))
        return {"deleted": name}

    @router.get(
        "/api/cache/stats", tags=["cache"],
        summary="Cache statistics (the most requested texts for the admin only)",
    )  # fmt: skip
    async def stats(caller: CallerDep, top: int = 20) -> dict[str, Any]:
        if not 1 <= top <= 100:
            raise ValidationError("top: use 1 to 100")
        return dict(await to_thread.run_sync(lambda: service.dashboard.snapshot(top, caller=caller)))

    @router.post(
        "/api/cache/clear", tags=["cache", "admin"], summary="Clear the cache, one tag, or expired entries (admin)",
        responses={400: ERROR_RESPONSES[400], **ADMIN_RESPONSES},
    )  # fmt: skip
    async def clear(caller: CallerDep, body: ClearRequest | None = None) -> dict[str, Any]:
        body = body or ClearRequest(tag=None, expired_only=False, drop_approved=False)
        if body.tag is not None and body.expired_only:
            raise ValidationError("give tag or expired_only, not both")
        if body.drop_approved and (body.tag is not None or body.expired_only):
            raise ValidationError("drop_approved: only with a clear of everything (no tag, no expired_only)")
        report: ClearReport | EvictReport | SweepReport
        if body.tag is not None:
            tag = body.tag
            report = await to_thread.run_sync(lambda: service.admin.evict(tag, caller=caller))
        elif body.expired_only:
            report = await to_thread.run_sync(lambda: service.admin.sweep_expired(caller=caller))
        else:
            drop = body.drop_approved
            report = await to_thread.run_sync(lambda: service.admin.clear(caller=caller, drop_approved=drop))
        _LOGGER.warning("cache clear via API: %s", cut_fields(report))
        return dict(report)

    @router.post(
        "/api/cache/verify", tags=["cache", "admin"], summary="Check every entry; drop corrupt ones (admin)",
        responses=ADMIN_RESPONSES,
    )  # fmt: skip
    async def verify(caller: CallerDep) -> dict[str, Any]:
        return dict(await to_thread.run_sync(lambda: service.admin.verify(caller=caller)))

    @router.post(
        "/api/cache/make-missing", tags=["cache", "admin"],
        summary="Make the hot phrases and template pieces the cache lacks (admin)",
        responses={400: ERROR_RESPONSES[400], **ADMIN_RESPONSES},
    )  # fmt: skip
    async def make_missing_entries(caller: CallerDep) -> dict[str, Any]:
        """What ``GET /api/cache/stats`` counts as missing (``hot_missing``,
        ``pieces_missing``), made through the cache like any preload: what is cached is
        skipped, and a key a running preload makes is made once."""
        report = await to_thread.run_sync(lambda: make_missing(service, caller=caller))
        _LOGGER.warning("make missing via API: %s", report.summary())
        return {
            "made": report.generated, "cached": report.cached, "failed": report.failed, "total": report.total,
            "seconds": round(report.seconds, 1), "failures": report.failure_rows(), "summary": report.summary(),
        }  # fmt: skip

    @router.get(
        "/metrics", tags=["operations"], summary="Prometheus metrics (tts_*)", response_class=Response,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
    )  # fmt: skip
    async def metrics() -> Response:
        return Response(service.dashboard.metrics.exposition(), media_type=CONTENT_TYPE)

    @router.get(
        "/healthz", tags=["operations"], summary="Engine and cache health",
        responses={503: {"description": "The engine cannot serve"}},
    )  # fmt: skip
    async def healthz() -> JSONResponse:
        health: dict[str, Any] = dict(service.dashboard.health())
        try:
            check = getattr(service.engine, "check", None)
            if callable(check):
                await to_thread.run_sync(check)
        except EngineUnavailableError as exc:
            health.update(status="unavailable", error=str(exc))
            return JSONResponse(health, status_code=503)
        if not health.get("cache", {}).get("available", True):
            health["status"] = "degraded"  # serving, without the disk tier
        return JSONResponse(health)

    return router


def preload_router(preload: BackgroundPreload) -> APIRouter:
    """``GET /api/preload``: the start-up preload's progress (public, like ``/healthz``:
    counts only, no phrase text)."""
    router = APIRouter()

    @router.get("/api/preload", tags=["operations"], summary="The start-up preload's progress")
    async def preload_status() -> PreloadStatus:
        return preload.status()

    return router
