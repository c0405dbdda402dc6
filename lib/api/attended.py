"""Synthesis for a client that may hang up: work nobody waits for is dropped.

Each synthesising request (``POST /api/tts``, streamed or not, and ``POST
/v1/audio/speech``, SSE too) runs its service call for a :class:`~lib.core.waiting.Caller`,
which leaves when the client disconnects (the ASGI ``http.disconnect``: uvicorn reports
the socket closed at once) or when the answer is over. The single flights share the
work between the requests waiting for the same keys; the engine watchdog starts no call
that nobody waits for any more (:mod:`lib.core.waiting`). A sentence already in the
engine is finished and stored; the ones after it are not made; the whole is not stored.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, TypeVar

import anyio
from anyio import to_thread
from fastapi.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from lib.core.waiting import Caller, waited_by
from lib.errors import AbandonedError

__all__ = ["AttendedStream", "attended", "on_disconnect"]

_LOGGER = logging.getLogger(__name__)

T = TypeVar("T")


async def on_disconnect(receive: Receive, caller: Caller) -> None:
    """Wait for ``http.disconnect`` (the body was read before), then let ``caller`` go."""
    while True:
        try:
            message = await receive()
        except Exception as exc:  # a receive that fails says nothing of the client: the work goes on
            _LOGGER.debug("cannot watch for a disconnect: %s", type(exc).__name__)
            return
        if message["type"] == "http.disconnect":
            _left(caller)
            return


def _left(caller: Caller) -> None:
    if caller.alive():
        caller.leave("disconnected")
        _LOGGER.info("client disconnected before its answer was made: work nobody else waits for is dropped")


async def attended(receive: Receive, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` in a worker thread for a caller who leaves when the client
    disconnects meanwhile. The call is not cancelled (a thread cannot be): what it waits
    for fails at once with :class:`lib.errors.AbandonedError` when nobody else waits."""
    caller = Caller()
    done: list[T] = []
    failed: list[BaseException] = []

    def work() -> None:
        try:
            done.append(fn(*args))
        except Exception as exc:  # raised below, outside the task group (which would wrap it in a group)
            failed.append(exc)

    async with anyio.create_task_group() as group:
        group.start_soon(on_disconnect, receive, caller)
        try:
            with waited_by(caller):
                await to_thread.run_sync(work)
        finally:
            caller.leave("answered")
            group.cancel_scope.cancel()
    if failed:
        raise failed[0]
    return done[0]


class AttendedStream(StreamingResponse):
    """A streamed answer whose ``caller`` (the one its work was started for, with
    :func:`waited_by`) leaves as soon as the client disconnects, not when the next chunk
    comes: Starlette's listener sees the disconnect at once, while the body's thread may
    wait for a sentence still being made."""

    def __init__(self, caller: Caller, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.caller = caller

    async def listen_for_disconnect(self, receive: Receive) -> None:
        await super().listen_for_disconnect(receive)
        _left(self.caller)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except AbandonedError:
            pass  # the rest was dropped because this client left: nobody to tell
        finally:
            self.caller.leave("disconnected")
