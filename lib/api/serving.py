"""Serving the app with uvicorn, hardened against slow clients: one place for the
server settings that ``webui.py`` and ``python -m lib.api`` share.

What a slow or idle client can hold, and for how long (``server:`` in config.yaml):

- ``header_timeout``: a connection must deliver a request's line and headers within
  this many seconds of its first byte (or of opening, for a new connection); then it
  is answered 408 and closed. uvicorn has no such deadline of its own (its keep-alive
  timer stops at the first byte of the next request), so a client sending one header
  byte every few seconds held a connection forever.
- ``body_timeout``: the whole body within this many seconds of the headers, else 408
  (:class:`lib.api.guards.BodyTimeout`).
- ``keepalive_timeout``: an idle keep-alive connection is closed after this long.
- ``max_connections``: beyond this many connections (and request tasks) at once a new
  request is answered 503 at once instead of queueing (uvicorn's ``limit_concurrency``
  rule, answered in JSON with ``Retry-After`` like every other error of the API, where
  uvicorn's own answer is plain text).
- ``max_header_bytes``: the longest request line and headers accepted (400 beyond).

In production, put a reverse proxy in front anyway (README, "Serving in production"):
it buffers slow clients so that none of them reaches the app at all.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any, NoReturn

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from lib.config import ServerConfig
from lib.core.ratelimit import LogLimiter

__all__ = ["exit_now", "guarded_protocol", "serve", "uvicorn_config"]

_LOGGER = logging.getLogger(__name__)
_LIMITER = LogLimiter(_LOGGER)
_OVER_LIMIT = (
    b'{"error": "the server is serving as many connections as it may (server.max_connections); retry in a moment"}'
)

_REQUEST_TIMEOUT = b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\nconnection: close\r\n"


def _timeout_response() -> bytes:
    body = b'{"error": "the request headers did not arrive in time (server.header_timeout); send them faster"}'
    return _REQUEST_TIMEOUT + b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body


class _HeaderDeadline(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request's line and headers."""

    header_timeout = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # uvicorn's concurrency rule, checked by _limited instead, which answers in JSON.
        self._limit = self.limit_concurrency or 0
        self.limit_concurrency = None
        if self._limit:
            self._app = self.app
            self.app = self._limited

    async def _limited(self, scope: Any, receive: Any, send: Any) -> None:
        # uvicorn checks before it adds the request's task; here the task is counted.
        if len(self.connections) < self._limit and len(self.tasks) <= self._limit:
            await self._app(scope, receive, send)
            return
        _LIMITER.log(logging.WARNING, "max-connections", "over server.max_connections (%d): answered 503", self._limit)
        headers = [
            (b"content-type", b"application/json"), (b"content-length", str(len(_OVER_LIMIT)).encode()),
            (b"retry-after", b"1"), (b"connection", b"close"),
        ]  # fmt: skip
        await send({"type": "http.response.start", "status": 503, "headers": headers})
        await send({"type": "http.response.body", "body": _OVER_LIMIT, "more_body": False})

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._header_timer: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self.transport.is_closing():
            self._disarm()
        elif self.conn.their_state is h11.IDLE:
            self._arm()  # a new request's headers are under way: the clock runs from its first byte
        else:
            self._disarm()  # headers complete: the body has its own deadline (BodyTimeout)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        if self._header_timer is None:
            self._header_timer = self.loop.call_later(self.header_timeout, self._expired)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def _expired(self) -> None:
        self._header_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if self.conn.trailing_data[0]:  # part of a request arrived: tell the client why
            self.transport.write(_timeout_response())
        self.transport.close()


def guarded_protocol(header_timeout: float) -> type[H11Protocol]:
    """An h11 protocol class closing connections whose headers take longer than
    ``header_timeout`` seconds."""
    return type("HeaderDeadlineH11", (_HeaderDeadline,), {"header_timeout": header_timeout})


#: Seconds uvicorn waits, once told to stop, for the responses under way before it cancels
#: them; uvicorn's default waits forever, and a request stuck on the engine held it so.
GRACEFUL_SECONDS = 5


def uvicorn_config(app: Any, server: ServerConfig, **options: Any) -> uvicorn.Config:
    """A uvicorn configuration serving ``app`` with the ``server:`` settings."""
    options.setdefault("host", server.host)
    options.setdefault("port", server.port)
    options.setdefault("log_level", "warning")
    options.setdefault("timeout_graceful_shutdown", GRACEFUL_SECONDS)
    return uvicorn.Config(
        app,
        http=guarded_protocol(server.header_timeout),
        timeout_keep_alive=server.keepalive_timeout,  # type: ignore[arg-type]  # a float works
        limit_concurrency=server.max_connections,
        h11_max_incomplete_event_size=server.max_header_bytes,
        **options,
    )


class _Server(uvicorn.Server):
    """uvicorn's server telling the app when it is told to stop (SIGTERM, Ctrl-C)."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None] | None) -> None:
        super().__init__(config)
        self._on_exit = on_exit

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self._on_exit is not None and not self.should_exit:
            # From a thread: a signal handler must not take the locks the callback may take.
            threading.Thread(target=self._on_exit, name="on-exit", daemon=True).start()
        super().handle_exit(sig, frame)


def serve(app: Any, server: ServerConfig, *, on_exit: Callable[[], None] | None = None, **options: Any) -> None:
    """Serve ``app`` until interrupted (what ``webui.py`` and ``python -m lib.api`` run).
    ``on_exit`` is called once the server is told to stop, before it waits for the
    responses under way (``Watchdog.drain``: engine calls under way are stopped at once,
    their work abandoned, so that those responses end at once too).

    Returns after SIGTERM as after Ctrl-C, so that the caller's ``finally`` closes the
    service (pending cache writes flushed, threads joined): uvicorn re-raises the signal
    it caught once it has shut down, and SIGTERM's default action ended the process on
    the spot, skipping that."""
    restore = None
    if threading.current_thread() is threading.main_thread():
        restore = signal.signal(signal.SIGTERM, signal.default_int_handler)  # re-raised as KeyboardInterrupt
    try:
        with contextlib.suppress(KeyboardInterrupt):  # uvicorn re-raises the signal after shutting down
            _Server(uvicorn_config(app, server, **options), on_exit).run()
    finally:
        if restore is not None:
            signal.signal(signal.SIGTERM, restore)


def exit_now(code: int) -> NoReturn:
    """End a server process whose ``main()`` returned ``code`` (the service closed: cache
    writes flushed, threads joined): the at-exit functions run and the logs are flushed,
    then the process ends without the interpreter's own teardown, which frees every
    module's objects one by one and took 1.5-2.5 s more after a SIGTERM (the web UI's
    stop went from 0.9 s to 3.4 s: gradio's modules, the Kokoro model's session)."""
    atexit._run_exitfuncs()
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)
