"""ASGI guards in front of the whole app (API and UI): a deadline for reading request
bodies, and 405 for methods a path does not serve.

A slow client that trickles its body holds a connection and a request task for as long
as it likes unless someone times it out; uvicorn does not. :class:`BodyTimeout` gives
every request ``server.body_timeout`` seconds from its headers to its last body byte,
then answers 408 and closes the connection. (The header deadline lives in
:mod:`lib.api.serving`: before the headers are complete there is no ASGI request yet.)

:class:`MethodGuard` answers 405 with a JSON error and an ``Allow`` header for a method
an API path does not serve (``PATCH /api/tts``), and for ``TRACE`` and ``CONNECT``
anywhere: the web UI is mounted at ``/`` and would otherwise answer them 404.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable

from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import error_response

__all__ = ["BodyTimeout", "BodyTimeoutError", "MethodGuard"]

_NEVER = frozenset({"TRACE", "CONNECT"})
_KNOWN_PATHS = 1024


class BodyTimeoutError(HTTPException):
    """Raised from ``receive`` when the body did not arrive in time. An
    ``HTTPException`` so that FastAPI's body parsing passes it on as it is (408)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(
            status_code=408,
            detail=f"the request body did not arrive within {seconds:g} s (server.body_timeout); send it faster",
            headers={"Connection": "close"},
        )


class BodyTimeout:
    """Every request body must arrive within ``seconds`` of its headers."""

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.seconds
        complete = False

        async def timed_receive() -> Message:
            nonlocal complete
            if complete:  # after the body, receive only waits for a disconnect: no deadline
                return await receive()
            try:
                # A timeout on this task, not wait_for's task per call: a body that has
                # arrived is read at once, without an extra turn of the event loop.
                async with asyncio.timeout_at(deadline):
                    message = await receive()
            except TimeoutError:
                raise BodyTimeoutError(self.seconds) from None
            if message["type"] != "http.request" or not message.get("more_body", False):
                complete = True
            return message

        await self.app(scope, timed_receive, send)


class MethodGuard:
    """405 (JSON, with ``Allow``) for methods an API path does not serve, and for
    TRACE and CONNECT on every path. ``routes`` (the API routers' routes, as included
    without a prefix) is read once, on the first request."""

    def __init__(self, app: ASGIApp, routes: Callable[[], Iterable[BaseRoute]]) -> None:
        self.app = app
        self._routes = routes
        self._table: list[tuple[str, APIRoute, frozenset[str]]] | None = None
        self._known: dict[str, frozenset[str]] = {}
        """Allowed methods of paths seen lately (a hot path is asked again and again);
        emptied when it reaches ``_KNOWN_PATHS``, so it stays small whatever clients send."""

    def _allowed(self, path: str) -> frozenset[str]:
        known = self._known.get(path)
        if known is None:
            known = self._lookup(path)
            if len(path) <= 256:  # and small: a long path is looked up every time
                if len(self._known) >= _KNOWN_PATHS:
                    self._known.clear()
                self._known[path] = known
        return known

    def _lookup(self, path: str) -> frozenset[str]:
        if self._table is None:
            # Each route's path up to its first parameter: a cheap startswith before
            # the regex, which most routes then never need (this runs on every request).
            self._table = [
                (route.path.split("{", 1)[0], route, frozenset(route.methods or ()))
                for route in self._routes()
                if isinstance(route, APIRoute)
            ]
        allowed: set[str] = set()
        for prefix, route, methods in self._table:
            if path.startswith(prefix) and route.path_regex.match(path):
                allowed |= methods
        if "GET" in allowed:
            allowed.add("HEAD")
        return frozenset(allowed)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            method, path = scope["method"], scope["path"]
            allowed = self._allowed(path)
            if method in _NEVER or (allowed and method not in allowed):
                listed = ", ".join(sorted(allowed - _NEVER))
                message = f"method {method} is not allowed on {path}" + (f"; allowed: {listed}" if listed else "")
                # Allow is known for API paths only; the UI's own routes are not listed.
                headers = {"Allow": listed} if listed else None
                response = error_response(Request(scope), 405, message + " (see /docs)", headers=headers)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
