"""Error translation at the HTTP boundary: every failure becomes JSON.

``/api/*`` and the rest answer ``{"error": "<what is wrong and how to fix it>"}``; the
OpenAI-compatible ``/v1/*`` answers OpenAI's shape, ``{"error": {"message", "type",
"param", "code"}}``, so OpenAI client libraries raise their usual exceptions. Each
error is translated here once; handlers raise :class:`lib.errors.TTSError` subclasses.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from lib.core.logtext import cut_text
from lib.errors import NotFoundError, RateLimitedError, TTSError, log_safe

__all__ = [
    "ERROR_RESPONSES",
    "error_response",
    "failure_response",
    "install_error_handlers",
    "install_routing_errors",
    "validation_message",
]

_LOGGER = logging.getLogger(__name__)

#: OpenAPI description of the error body, shared by every route.
_ERROR_SCHEMA: dict[str, Any] = {
    "application/json": {
        "schema": {
            "type": "object",
            "required": ["error"],
            "properties": {"error": {"type": "string", "description": "What is wrong and how to fix it."}},
        }
    }
}
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    400: {"description": "A field is missing or invalid", "content": _ERROR_SCHEMA},
    404: {"description": "Unknown voice or key", "content": _ERROR_SCHEMA},
    413: {"description": "Upload larger than prompt.max_upload_bytes", "content": _ERROR_SCHEMA},
    415: {"description": "Prompt audio is not decodable audio", "content": _ERROR_SCHEMA},
    422: {"description": "Prompt audio too short, too long or silent", "content": _ERROR_SCHEMA},
    429: {"description": "Over a limit of the caller (its key's, or its address's)", "content": _ERROR_SCHEMA},
    503: {"description": "The engine (or the voice library) is not available", "content": _ERROR_SCHEMA},
}

_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    408: "invalid_request_error",
    409: "invalid_request_error",  # a voice name that is taken: the request's fault, not the server's
    413: "invalid_request_error",
    415: "invalid_request_error",
    422: "invalid_request_error",
    429: "requests",  # OpenAI's type of a rate limit (its code: rate_limit_exceeded)
    503: "server_error",
}


def error_response(
    request: Request, status: int, message: str, *, param: str | None = None, headers: dict[str, str] | None = None,
    code: str | None = None,
) -> JSONResponse:  # fmt: skip
    """The one place error bodies are built (``code``: OpenAI's, e.g. ``model_not_found``)."""
    if request.url.path.startswith("/v1/"):
        body: dict[str, Any] = {
            "error": {
                "message": message,
                "type": _OPENAI_TYPES.get(status, "server_error"),
                "param": param,
                "code": code,
            }
        }
    else:
        body = {"error": message}
    return JSONResponse(body, status_code=status, headers=headers)


def validation_message(errors: list[Any]) -> tuple[str, str | None]:
    """Pydantic/FastAPI validation errors -> one readable line naming each field."""
    parts: list[str] = []
    first: str | None = None
    for err in errors[:5]:
        loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path", "header")]
        # A body that is not JSON at all is located at a character offset, not a field.
        field = loc[0] if loc and err.get("type") != "json_invalid" else "body"
        first = first or field
        msg = str(err.get("msg", "is invalid"))
        if err.get("type") == "missing":
            msg = "is required"
        elif err.get("type") == "json_invalid":
            msg = "is not valid JSON; send a JSON object as documented (see /docs)"
        parts.append(f"{field}: {msg}")
    return "; ".join(parts) or "the request is invalid", first


def failure_response(request: Request, exc: Exception) -> JSONResponse:
    """The answer to a request that raised ``exc``: a :class:`TTSError` with its status and
    message, anything else a logged 500 (a bug). The app's handlers and the hit fast path
    (which answers some misses itself) both answer through it."""
    if not isinstance(exc, TTSError):
        _LOGGER.error("unexpected error on %s %s: %s", request.method, request.url.path, log_safe(exc))
        return error_response(request, 500, "internal error; the server log has the details")
    status = exc.http_status
    if request.url.path == "/v1/audio/speech" and isinstance(exc, NotFoundError):
        status = 400  # OpenAI answers an unknown voice with 400 invalid_request_error
    if status >= 500 and status != 503:
        _LOGGER.error("%s %s failed: %s", request.method, request.url.path, cut_text(str(exc), 200))
    param = str(exc).split(":", 1)[0] if ":" in str(exc)[:24] else None
    if isinstance(exc, RateLimitedError):
        return error_response(request, status, str(exc), headers=exc.headers, code=exc.code)
    return error_response(request, status, str(exc), param=param)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(TTSError)
    async def _tts_error(request: Request, exc: TTSError) -> JSONResponse:
        return failure_response(request, exc)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        message, field = validation_message(list(exc.errors()))
        return error_response(request, 400, message, param=field)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = _routing_message(request, exc) or str(exc.detail)
        if exc.status_code == 400 and message == "There was an error parsing the body":
            message = "the request body could not be parsed; send multipart/form-data or JSON as documented"
        return error_response(request, exc.status_code, message, headers=getattr(exc, "headers", None))

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> JSONResponse:
        return failure_response(request, exc)


def _routing_message(request: Request, exc: StarletteHTTPException) -> str | None:
    """The message of a routing error (no route for the path, or not for the method);
    None for an error a route raised on purpose."""
    if exc.status_code == 404 and exc.detail == "Not Found":
        return f"no such endpoint: {request.url.path}; see /docs for the API"
    if exc.status_code == 405:
        return f"method {request.method} is not allowed on {request.url.path}; see /docs"
    return None


def install_routing_errors(app: FastAPI) -> None:
    """On an app mounted beside the API (the web UI at ``/``, which gets every path the
    API has no route for): routing 404s and 405s in the API's shape, so ``GET /api/nope``
    answers ``{"error": ...}`` whichever app ends up refusing it. The mounted app's own
    errors (Gradio's, read by its front end) keep their shape."""

    @app.exception_handler(StarletteHTTPException)
    async def _routing(request: Request, exc: StarletteHTTPException) -> Any:
        message = _routing_message(request, exc)
        if message is None:
            return await http_exception_handler(request, exc)
        return error_response(request, exc.status_code, message, headers=getattr(exc, "headers", None))
