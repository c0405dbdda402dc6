"""The hit fast path: cache hits from memory answered in front of the router.

A hit is the common request and the cheapest to serve, yet FastAPI spends more on one
than the cache does: solving the fourteen form fields of ``POST /api/tts`` (~0.12 ms of
per-request introspection, more than the whole service lookup) and a hop to a worker
thread (~0.07 ms). :class:`HitFastPath` answers the two hit requests itself:

- ``GET /api/audio/{key}.{ext}`` whose entry and bytes are in memory (no ``Range``);
- ``POST /api/tts`` with a small form (no upload, no ``stream``, no JSON answer) whose
  answer is a hit from the memory tier (:meth:`TTSService.memory_hit`, no I/O).

Everything else -- and anything it is not sure about: a field that does not validate,
a voice or an entry that is not in memory -- goes on to the endpoints untouched (a form
it read is replayed), so every error and every miss keeps one implementation. The
answers are built by the endpoints' own functions (:mod:`lib.api.speech`), with the same
route in ``scope`` for the HTTP metrics, and the service records each request once.

It sits inside the guards (body deadline, upload limit, 405, metrics), which see these
requests as they see any other.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field
from pydantic import ValidationError as InvalidForm
from starlette.requests import Request
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lib.service import TTSService
from lib.validate import MAX_SEED, MAX_SPEED, MAX_TTL, MIN_SPEED

from .speech import (
    AUDIO_EXTS,
    Format,
    Mode,
    hit_bytes,
    not_modified,
    stored_response,
    tts_headers,
    tts_request,
    tts_response,
)

__all__ = ["MAX_FORM_BYTES", "FastPathCounts", "HitFastPath", "TTSForm"]

_LOGGER = logging.getLogger(__name__)

#: A form larger than this (an upload) goes to the endpoint without being read here.
MAX_FORM_BYTES = 64 * 1024

_AUDIO_PATH = re.compile(rf"^/api/audio/([0-9a-fA-F]{{32}})\.({AUDIO_EXTS})$")
_FORM_TYPES = (b"multipart/form-data", b"application/x-www-form-urlencoded")


class TTSForm(BaseModel):
    """The fields of ``POST /api/tts`` with the endpoint's types and bounds (a test
    holds the two to the same schema). No ``prompt_audio`` and no ``stream``: a form
    with either goes to the endpoint."""

    model_config = ConfigDict(extra="ignore")

    text: str
    voice: str | None = None
    prompt_text: str = ""
    style: str = ""
    seed: Annotated[int, Field(ge=0, le=MAX_SEED)] = 0
    speed: Annotated[float, Field(ge=MIN_SPEED, le=MAX_SPEED)] = 1.0
    mode: Mode | None = None
    format: Format = "wav"
    cache: bool = True
    store: bool = True
    ttl: Annotated[float | None, Field(gt=0, le=MAX_TTL, allow_inf_nan=False)] = None


@dataclass
class FastPathCounts:
    """Requests the fast path answered itself (``app.state.fast_path``)."""

    audio: int = 0
    tts: int = 0


class HitFastPath:
    """ASGI middleware answering memory hits of ``/api/audio`` and ``/api/tts`` (see the
    module); ``counts`` counts them. ``routes`` (the API's routes) is read on the first
    answer, for the route each request is labelled with."""

    def __init__(
        self, app: ASGIApp, service: TTSService, routes: Callable[[], Iterable[BaseRoute]], counts: FastPathCounts
    ) -> None:
        self.app = app
        self.service = service
        self._routes = routes
        self._found: dict[tuple[str, str], BaseRoute] = {}
        self.counts = counts

    def _route(self, method: str, path: str) -> BaseRoute | None:
        """The endpoint's route (for the metrics' label), found once."""
        found = self._found.get((method, path))
        if found is None:
            for route in self._routes():
                if getattr(route, "path", None) == path and method in (getattr(route, "methods", None) or ()):
                    found = self._found[(method, path)] = route
                    break
        return found

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            method = scope["method"]
            if method == "GET":
                match = _AUDIO_PATH.match(scope["path"])
                if match is not None and await self._audio(scope, match, send):
                    return
            elif method == "POST" and scope["path"] == "/api/tts":
                replay = await self._tts(scope, receive, send)
                if replay is None:
                    return
                receive = replay
        await self.app(scope, receive, send)

    # -- GET /api/audio/{key}.{ext} ------------------------------------------------------------

    async def _audio(self, scope: Scope, match: re.Match[str], send: Send) -> bool:
        if_none_match = None
        for name, value in scope["headers"]:
            if name == b"range" or name == b"if-range":
                return False  # partial content: the endpoint
            if name == b"if-none-match":
                if_none_match = value.decode("latin-1")
        key, fmt = match.group(1).lower(), match.group(2)
        if self.service.cache.objects is not None and self.service.cache.objects.redirects(fmt):
            return False  # a 302 to the object store: the endpoint (it asks the store)
        entry = self.service.cache.memory_entry(key)
        if entry is None:
            return False
        response = not_modified(key, fmt, entry, if_none_match)
        if response is None:
            body = self.service.cache.ready_bytes(key, fmt)
            if body is None:
                return False  # a transcode to make: the endpoint, in a worker thread
            response = stored_response(key, fmt, entry, body)
        route = self._route("GET", "/api/audio/{key}.{ext}")
        if route is None:
            return False
        scope["route"] = route
        self.counts.audio += 1
        await response(scope, _no_receive, send)
        return True

    # -- POST /api/tts ---------------------------------------------------------------------------

    async def _tts(self, scope: Scope, receive: Receive, send: Send) -> Receive | None:
        """None when answered here; else the ``receive`` the endpoint must read from (the
        original one, or a replay of the body read here)."""
        length = -1
        form_type = json_wanted = False
        for name, value in scope["headers"]:
            if name == b"content-length":
                length = int(value) if value.isdigit() else -1
            elif name == b"content-type":
                form_type = value.split(b";", 1)[0].strip().lower() in _FORM_TYPES
            elif name == b"accept":
                json_wanted = json_wanted or b"application/json" in value
        if not form_type or json_wanted or not 0 <= length <= MAX_FORM_BYTES:
            return receive
        messages: list[Message] = []
        more = True
        try:
            while more:
                message = await receive()
                messages.append(message)
                more = message["type"] == "http.request" and message.get("more_body", False)
        except Exception as exc:  # a guard refused the body (408, 413): raised where the endpoint reads it
            return _replay(messages, _raise(exc))
        replay = _replay(messages, receive)
        if messages[-1]["type"] != "http.request":  # the client went away: the endpoint's business
            return replay
        form = await _parse(scope, messages)
        if form is None:
            return replay
        result = self.service.memory_hit(tts_request(prompt_audio=None, **form.model_dump()))
        if result is None:
            return replay
        # Recorded as a hit from here on: answer it, whatever it takes.
        body = await hit_bytes(self.service, result, form.format)
        response = tts_response(body, form.format, tts_headers(result, form.format, stored=True))
        route = self._route("POST", "/api/tts")
        if route is not None:
            scope["route"] = route
        self.counts.tts += 1
        await response(scope, replay, send)
        return None


async def _parse(scope: Scope, messages: list[Message]) -> TTSForm | None:
    """The form if it is one the fast path may answer, else None (the endpoint then reads
    it again and says what is wrong, if anything is)."""
    try:
        async with Request(scope, _replay(messages, _no_receive)).form() as form:
            fields: dict[str, str] = {}
            for name, value in form.multi_items():
                if not isinstance(value, str) or name in ("prompt_audio", "stream"):
                    return None  # an upload, a stream: the endpoint's work
                if value:  # as FastAPI reads a form: an empty field is an absent one
                    fields[name] = value
                else:
                    fields.pop(name, None)
    except Exception:  # any parse failure is the endpoint's to report
        return None
    try:
        return TTSForm.model_validate(fields)
    except InvalidForm:
        return None


def _replay(messages: list[Message], receive: Receive) -> Receive:
    """A ``receive`` giving ``messages`` again, then what ``receive`` gives."""
    pending = list(messages)

    async def replayed() -> Message:
        if pending:
            return pending.pop(0)
        return await receive()

    return replayed


def _raise(exc: Exception) -> Receive:
    async def raising() -> Message:
        raise exc

    return raising


async def _no_receive() -> Message:
    return {"type": "http.disconnect"}
