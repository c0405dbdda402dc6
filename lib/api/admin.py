"""Voices, cache statistics and administration, metrics and health.

Admin actions (clearing, verifying, deleting a voice) need ``Authorization: Bearer
<token>`` when a token is configured. The token comes from the environment variable
named by ``server.admin_token_env`` (default ``TTS_ADMIN_TOKEN``), never from a file
in the repository. With no token configured they are served to loopback clients only:
behind a reverse proxy on the same host every client looks local, so set a token there.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
from typing import Annotated, Any

from anyio import to_thread
from fastapi import APIRouter, Depends, File, Form, Request, UploadFile
from fastapi.responses import JSONResponse, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

from lib.errors import EngineUnavailableError, PayloadTooLargeError, TTSError, ValidationError
from lib.metrics import CONTENT_TYPE
from lib.service import TTSService
from lib.textnorm import cut_text

from .errors import ERROR_RESPONSES
from .http import too_large_message

__all__ = ["ClearRequest", "admin_router", "is_loopback"]

_LOGGER = logging.getLogger(__name__)

_bearer = HTTPBearer(auto_error=False, description="The admin token (environment variable TTS_ADMIN_TOKEN)")
_ADMIN_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"description": "Admin token missing", "content": ERROR_RESPONSES[400]["content"]},
    403: {"description": "Admin token wrong, or no token configured and the client is not local"},
}


class ClearRequest(BaseModel):
    """Body of ``POST /api/cache/clear``; no body clears everything."""

    model_config = ConfigDict(extra="forbid")

    tag: str | None = Field(
        None, max_length=200, description="Evict one tag only: engine:model_version, or voice:<fingerprint>"
    )
    expired_only: bool = Field(False, description="Remove expired entries only")


class AdminAuth:
    """The admin check, as a FastAPI dependency."""

    def __init__(self, token: str | None, env_name: str) -> None:
        self.token = token or None
        self.env_name = env_name

    async def __call__(
        self, request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
    ) -> None:
        if self.token is None:
            host = request.client.host if request.client else ""
            if not is_loopback(host):
                raise _Forbidden(
                    f"admin endpoints are refused to remote clients when no admin token is configured; "
                    f"set {self.env_name} on the server and send 'Authorization: Bearer <token>'"
                )
            return
        if credentials is None or credentials.scheme.lower() != "bearer":
            raise _Unauthorized("this admin endpoint needs 'Authorization: Bearer <token>'")
        if not hmac.compare_digest(credentials.credentials.encode(), self.token.encode()):
            raise _Forbidden("the admin token is wrong; use the value of the server's admin token variable")


class _Unauthorized(TTSError):
    http_status = 401


class _Forbidden(TTSError):
    http_status = 403


def admin_router(service: TTSService, admin_token: str | None) -> APIRouter:
    router = APIRouter()
    admin = Depends(AdminAuth(admin_token, service.config.server.admin_token_env))
    upload_limit = service.config.prompt.max_upload_bytes

    @router.get("/api/voices", tags=["voices"], summary="Saved and preset voices")
    async def list_voices() -> dict[str, Any]:
        return {"voices": await to_thread.run_sync(service.list_voices)}

    @router.post(
        "/api/voices", tags=["voices"], summary="Save a prompt as a named voice", status_code=201,
        responses={k: v for k, v in ERROR_RESPONSES.items() if k != 503},
    )  # fmt: skip
    async def save_voice(
        name: Annotated[str, Form(description="1-64 letters, digits, spaces, '.', '-' or '_'")],
        prompt_audio: Annotated[UploadFile, File(description="Prompt voice recording, 1-30 s")],
        prompt_text: Annotated[str, Form(description="Transcript of the prompt, for zero-shot cloning")] = "",
    ) -> dict[str, Any]:
        if prompt_audio.size is not None and prompt_audio.size > upload_limit:
            raise PayloadTooLargeError(too_large_message(upload_limit))
        audio = await prompt_audio.read()
        if not audio:
            raise ValidationError("prompt_audio: the uploaded file is empty; upload a recording of speech")
        saved = await to_thread.run_sync(service.save_voice, name, audio, prompt_text)
        _LOGGER.info("voice saved: %s", cut_text(name))
        return {"voice": saved}

    @router.delete(
        "/api/voices/{name}", tags=["voices", "admin"], summary="Delete a saved voice (admin)",
        dependencies=[admin], responses={404: ERROR_RESPONSES[404], **_ADMIN_RESPONSES},
    )  # fmt: skip
    async def delete_voice(name: str) -> dict[str, Any]:
        await to_thread.run_sync(service.delete_voice, name)
        _LOGGER.info("voice deleted: %s", cut_text(name))
        return {"deleted": name}

    @router.get("/api/cache/stats", tags=["cache"], summary="Cache statistics")
    async def stats(top: int = 20) -> dict[str, Any]:
        if not 1 <= top <= 100:
            raise ValidationError("top: use 1 to 100")
        snap = await to_thread.run_sync(service.snapshot, top)
        for which in ("top_requested", "top_missed"):
            snap[which] = [dict(row, text=cut_text(str(row.get("text", "")))) for row in snap.get(which, [])]
        return snap

    @router.post(
        "/api/cache/clear", tags=["cache", "admin"], summary="Clear the cache, one tag, or expired entries (admin)",
        dependencies=[admin], responses={400: ERROR_RESPONSES[400], **_ADMIN_RESPONSES},
    )  # fmt: skip
    async def clear(body: ClearRequest | None = None) -> dict[str, Any]:
        body = body or ClearRequest(tag=None, expired_only=False)
        if body.tag is not None and body.expired_only:
            raise ValidationError("give tag or expired_only, not both")
        if body.tag is not None:
            report = await to_thread.run_sync(service.evict, body.tag)
        elif body.expired_only:
            report = await to_thread.run_sync(service.sweep_expired)
        else:
            report = await to_thread.run_sync(service.clear)
        _LOGGER.warning("cache clear via API: %s", report)
        return report

    @router.post(
        "/api/cache/verify", tags=["cache", "admin"], summary="Check every entry; drop corrupt ones (admin)",
        dependencies=[admin], responses=_ADMIN_RESPONSES,
    )  # fmt: skip
    async def verify() -> dict[str, Any]:
        return await to_thread.run_sync(service.verify)

    @router.get(
        "/metrics", tags=["operations"], summary="Prometheus metrics (tts_*)", response_class=Response,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
    )  # fmt: skip
    async def metrics() -> Response:
        return Response(service.metrics.exposition(), media_type=CONTENT_TYPE)

    @router.get(
        "/healthz", tags=["operations"], summary="Engine and cache health",
        responses={503: {"description": "The engine cannot serve"}},
    )  # fmt: skip
    async def healthz() -> JSONResponse:
        health = dict(service.health())
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


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a client address) is on this machine's loopback."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped.is_loopback
    return address.is_loopback
