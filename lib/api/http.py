"""Small HTTP helpers of the API: ETags, conditional requests, byte ranges, the
upload-size guard.

Nothing here knows about synthesis; it is plain HTTP, tested on its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "IMMUTABLE",
    "NO_STORE",
    "BodyTooLarge",
    "UploadLimit",
    "cache_control",
    "etag_for",
    "etag_matches",
    "parse_range",
    "too_large_message",
]

#: Cache-Control of audio addressed by key: a key names one immutable result.
IMMUTABLE = "public, max-age=31536000, immutable"
#: Cache-Control of a result that was not stored (bypass, ``store=false``): personal
#: data a proxy or browser must not keep either.
NO_STORE = "no-store"

_RANGE_RE = re.compile(r"^\s*bytes\s*=\s*(\d*)\s*-\s*(\d*)\s*$", re.IGNORECASE)


def cache_control(remaining: float | None) -> str:
    """Cache-Control for a stored entry with ``remaining`` seconds to live (None: no
    TTL). An entry that expires is private and may be kept only as long as it lives
    here (rounded down, so never longer); only an entry without a TTL is immutable."""
    if remaining is None:
        return IMMUTABLE
    return f"private, max-age={max(0, int(remaining))}"


def etag_for(key: str, fmt: str) -> str:
    """A strong ETag: one key in one format is always the same bytes."""
    return f'"{key}.{fmt}"'


def etag_matches(header: str | None, etag: str) -> bool:
    """``If-None-Match`` semantics (weak comparison, lists, ``*``)."""
    if not header:
        return False
    if header.strip() == "*":
        return True
    bare = etag.removeprefix("W/")
    return any(tag.strip().removeprefix("W/") == bare for tag in header.split(","))


def parse_range(header: str | None, size: int) -> tuple[int, int] | bool | None:
    """One ``Range: bytes=a-b`` against a body of ``size`` bytes.

    Returns ``(start, end)`` inclusive for a satisfiable single range, ``None`` when
    the header is absent, malformed or asks for several ranges (the whole body is
    then sent, as RFC 9110 allows), and ``False`` when it cannot be satisfied (416).
    """
    if not header:
        return None
    match = _RANGE_RE.match(header)
    if match is None:
        return None
    first, last = match.group(1), match.group(2)
    if not first and not last:
        return None
    if not first:  # suffix: the last N bytes
        length = int(last)
        if length == 0 or size == 0:
            return False
        return max(0, size - length), size - 1
    start = int(first)
    if last and int(last) < start:
        return None
    if start >= size:
        return False
    end = int(last) if last else size - 1
    return start, min(end, size - 1)


class UploadLimit:
    """ASGI middleware that refuses request bodies over ``limit`` bytes with 413
    before they are read whole.

    A declared ``Content-Length`` over the limit is refused without reading any of the
    body. A chunked body is counted as it arrives and refused as soon as it passes the
    limit. Either way the JSON error names the limit, so the client knows what to fix.
    """

    def __init__(self, app: ASGIApp, limit: int, paths: Iterable[str] = ()) -> None:
        self.app = app
        self.limit = limit
        self.paths = tuple(paths)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] in ("GET", "HEAD", "OPTIONS"):
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.limit:
            await self._refuse(send)
            return
        seen = 0
        started = False

        async def counted_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise BodyTooLarge(self.limit)
            return message

        async def watched_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, counted_receive, watched_send)
        except BodyTooLarge:
            if started:
                raise
            await self._refuse(send)

    async def _refuse(self, send: Send) -> None:
        body = json.dumps({"error": too_large_message(self.limit)}).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 413,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


class BodyTooLarge(HTTPException):
    """Raised from ``receive`` when a streamed body passes the limit. An
    ``HTTPException`` so that FastAPI's body parsing passes it on as it is (413), not
    as a generic parse error (400)."""

    def __init__(self, limit: int) -> None:
        super().__init__(status_code=413, detail=too_large_message(limit))
        self.limit = limit


def too_large_message(limit: int) -> str:
    return (
        f"upload is larger than the limit of {limit / 1e6:.1f} MB (prompt.max_upload_bytes); "
        "send a shorter prompt recording (1-30 s is enough)"
    )


def _content_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
