"""Tenants at the HTTP boundary: who each synthesis request is charged to, its request
rate, and the admin's key endpoints (``POST/GET /api/keys``, ``DELETE /api/keys/{name}``,
``GET /api/usage``).

:class:`TenantGate` sits in front of the synthesis endpoints (and the hit fast path): a
request with ``Authorization: Bearer <key>`` is its tenant's, one with the admin token
the admin's (no limits), one with no key anonymous (limited per client address); an
unknown key is 401, never anonymous. It counts the request against
``requests_per_minute`` (429 with ``Retry-After`` over it, OpenAI's
``x-ratelimit-*-requests`` headers on every answer) and names the caller's account for
the service (:func:`lib.tenants.acting`), which prices misses before any engine work.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lib.errors import RateLimitedError, UnauthorizedError, ValidationError
from lib.pipeline.service import TTSService
from lib.request.access import Action, check
from lib.tenants import Account, TenantRecord, acting
from lib.tenants.book import parse_limits

from .admin import ADMIN_RESPONSES, CallerDep
from .errors import ERROR_RESPONSES, error_response

__all__ = ["METERED", "TenantGate", "tenants_router"]

#: The requests that may start engine work: counted, and charged to their caller.
METERED = frozenset({
    ("POST", "/api/tts"), ("POST", "/v1/audio/speech"), ("POST", "/api/takes"), ("POST", "/api/convert"),
    ("POST", "/api/batch"),
})  # fmt: skip

_UNKNOWN_KEY = (
    "the API key is not known (revoked or mistyped): send a key made by POST /api/keys as "
    "'Authorization: Bearer <key>', or no Authorization header to be served as an anonymous caller"
)
_BAD_SCHEME = "the Authorization header is not a bearer token: send it as 'Authorization: Bearer <key>'"


def bearer(headers: list[tuple[bytes, bytes]]) -> tuple[str | None, bool]:
    """The bearer token of a request's headers, and whether another scheme came instead."""
    for name, value in headers:
        if name == b"authorization":
            text = value.decode("latin-1").strip()
            scheme, _, token = text.partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip(), False
            return None, bool(text)
    return None, False


class TenantGate:
    """See the module. Thread-safe; one per app."""

    def __init__(self, app: ASGIApp, service: TTSService) -> None:
        self.app = app
        self.service = service

    def _account(self, scope: Scope) -> Account | str | None:
        """The request's account; None for the admin; a message for a refusal (401)."""
        token, bad_scheme = bearer(scope["headers"])
        client = scope.get("client")
        host = client[0] if client else None
        if bad_scheme:
            return _BAD_SCHEME
        if self.service.access.caller(origin="http", client_host=host, token=token).admin:
            return None
        record: TenantRecord | None = None
        if token is not None:
            record = self.service.tenants.find(token)
            if record is None:
                return _UNKNOWN_KEY
        return self.service.tenants.account(record, host)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or (scope["method"], scope["path"]) not in METERED:
            await self.app(scope, receive, send)
            return
        account = self._account(scope)
        if isinstance(account, str):
            code = "invalid_api_key"
            await error_response(Request(scope), 401, account, code=code)(scope, receive, send)
            return
        if account is None:  # the admin: no limits, nobody charged
            await self.app(scope, receive, send)
            return
        try:
            rate = self.service.tenants.admit_request(account)
        except RateLimitedError as exc:
            await error_response(Request(scope), 429, str(exc), headers=exc.headers, code=exc.code)(
                scope, receive, send
            )
            return
        extra = [(name.encode(), value.encode()) for name, value in rate.items()]

        async def with_rate(message: Message) -> None:
            if message["type"] == "http.response.start" and extra:
                message = {**message, "headers": [*message.get("headers", []), *extra]}
            await send(message)

        with acting(account):
            await self.app(scope, receive, with_rate)


def tenants_router(service: TTSService) -> APIRouter:
    router = APIRouter(tags=["tenants"])
    tenants = service.tenants

    @router.post(
        "/api/keys",
        status_code=201,
        summary="Make an API key for a tenant (admin); the key is shown once",
        responses={**ADMIN_RESPONSES, 400: ERROR_RESPONSES[400], 409: {"description": "A key has this name"}},
    )
    async def create_key(request: Request, caller: CallerDep) -> JSONResponse:
        check(caller, Action.KEYS)
        body = await _json_object(request)
        record, key = tenants.create(body.get("name"), parse_limits(body))
        return JSONResponse({"name": record.name, "key": key, **record.limits.as_dict(), "created": record.created},
                            status_code=201, headers={"Cache-Control": "no-store"})  # fmt: skip

    @router.get(
        "/api/keys", summary="Every key's name, limits and usage (admin); never a key", responses=ADMIN_RESPONSES
    )
    async def list_keys(caller: CallerDep) -> dict[str, Any]:
        check(caller, Action.KEYS)
        usage: dict[str, dict[str, Any]] = {row["name"]: dict(row) for row in tenants.usage()}
        keys = []
        for record in tenants.records():
            row = usage.get(record.name, {})
            row.pop("name", None)
            keys.append({"name": record.name, **record.limits.as_dict(), "created": record.created, "usage": row})
        return {"keys": keys}

    @router.delete(
        "/api/keys/{name}",
        summary="Revoke a tenant's key on every replica (admin)",
        responses={**ADMIN_RESPONSES, 404: ERROR_RESPONSES[404]},
    )
    async def revoke_key(name: str, caller: CallerDep) -> dict[str, Any]:
        check(caller, Action.KEYS)
        tenants.revoke(name)
        return {"name": name, "revoked": True}

    @router.get(
        "/api/usage",
        summary="Usage by tenant: the admin sees every tenant and anonymous, a tenant itself",
        responses={401: ADMIN_RESPONSES[401]},
    )
    async def usage(request: Request, caller: CallerDep) -> dict[str, Any]:
        if caller.admin:
            return {"tenants": tenants.usage()}
        token, _ = bearer(request.scope["headers"])
        record = tenants.find(token) if token is not None else None
        if record is None:
            raise UnauthorizedError(
                "usage is read with an API key (a tenant's own) or the admin token: send 'Authorization: Bearer <key>'"
            )
        return {"tenants": tenants.usage([record.name])}

    return router


async def _json_object(request: Request) -> dict[str, Any]:
    try:
        body = json.loads(await request.body() or b"{}")
    except ValueError:
        raise ValidationError('body: is not valid JSON; send a JSON object such as {"name": "station-east"}') from None
    if not isinstance(body, dict):
        raise ValidationError('body: must be a JSON object such as {"name": "station-east"}')
    return body
