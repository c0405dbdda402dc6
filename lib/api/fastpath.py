"""The hit fast path: cache hits from memory answered in front of the router.

A hit is the common request and the cheapest to serve, yet FastAPI spends more on one
than the cache does: solving the form of ``POST /api/tts`` (~0.12 ms of per-request
introspection, more than the whole service lookup) and a hop to a worker thread
(~0.07 ms). :class:`HitFastPath` answers the two hit requests itself:

- ``GET /api/audio/{key}.{ext}`` whose entry and bytes are in memory (no ``Range``);
- ``POST /api/tts`` (no ``stream``, no JSON answer) whose answer is a hit from the memory
  tier (:meth:`TTSService.memory_hit`, no I/O): in a named voice, or in an uploaded prompt
  recording decoded before (found by its bytes, :meth:`PromptDecoder.remembered`, not
  decoded again). The form
  is :class:`lib.api.forms.TTSForm`, the endpoint's own model.

This is the one place a ``POST /api/tts`` is looked up in memory. A form it read whose
answer is not in memory is answered here too, in a worker thread, from the resolution
memory made (:meth:`TTSService.memory_lookup`), so that a miss is read, looked up and
resolved once; its errors are answered as the endpoint's are
(:func:`lib.api.errors.failure_response`). Everything else -- a form it does not read (a
stream, ``Accept: application/json``, ``cache=false``, a large body), a field that does not
validate -- goes on to the endpoint untouched (a form it read is replayed), so every error
keeps one implementation. The answers are built by the endpoints' own functions
(:mod:`lib.api.speech`), with the same route in ``scope`` for the HTTP metrics, and the
service records each request once.

It sits inside the guards (body deadline, upload limit, 405, metrics), which see these
requests as they see any other.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lib.pipeline.service import TTSService

from .errors import failure_response
from .forms import TTSForm
from .speech import AUDIO_EXTS, answer, hit_bytes, made, not_modified, stored_response, tts_headers, tts_response
from .uploads import read_upload

__all__ = ["MAX_FORM_BYTES", "MAX_UPLOAD_FORM_BYTES", "FastPathCounts", "HitFastPath", "TTSForm"]

_LOGGER = logging.getLogger(__name__)

#: An urlencoded form larger than this goes to the endpoint without being read here.
MAX_FORM_BYTES = 64 * 1024
#: A multipart form (it may carry a prompt recording) larger than this goes to the endpoint
#: without being read here: the body is held in memory while it is tried, and parsed on
#: the event loop (python-multipart: a fraction of a millisecond a MiB).
MAX_UPLOAD_FORM_BYTES = 2 * 1024 * 1024

_AUDIO_PATH = re.compile(rf"^/api/audio/([0-9a-fA-F]{{32}})\.({AUDIO_EXTS})$")
_MULTIPART = b"multipart/form-data"
_URLENCODED = b"application/x-www-form-urlencoded"


@dataclass
class FastPathCounts:
    """Requests the fast path answered itself (``app.state.fast_path``): memory hits of
    ``GET /api/audio`` and ``POST /api/tts``, and the ``POST /api/tts`` it had read
    whose answer was made in a worker thread (``made``)."""

    audio: int = 0
    tts: int = 0
    made: int = 0


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
        length, limit = -1, -1
        json_wanted = False
        for name, value in scope["headers"]:
            if name == b"content-length":
                length = int(value) if value.isdigit() else -1
            elif name == b"content-type":
                kind = value.split(b";", 1)[0].strip().lower()
                limit = MAX_UPLOAD_FORM_BYTES if kind == _MULTIPART else MAX_FORM_BYTES if kind == _URLENCODED else -1
            elif name == b"accept":
                json_wanted = json_wanted or b"application/json" in value
        if json_wanted or not 0 <= length <= limit:
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
        parsed = await self._parse(scope, messages)
        if parsed is None:
            return replay
        form, prompt = parsed
        request = form.request(prompt)
        lookup = self.service.memory_lookup(request)
        route = self._route("POST", "/api/tts")
        if route is not None:
            scope["route"] = route
        if lookup.result is None:
            # Not in memory: made here too, in a worker thread, from the form read and the
            # resolution made here (the request is read and resolved once); its errors
            # answered as the endpoint's are.
            self.counts.made += 1
            try:
                result, body = await made(self.service, lookup.resolved or request, receive)
                response = await answer(self.service, result, body, form.format, form.store, None)
            except Exception as exc:
                response = failure_response(Request(scope), exc)
        else:
            # Recorded as a hit from here on: answer it, whatever it takes.
            result = lookup.result
            body = await hit_bytes(self.service, result, form.format)
            response = tts_response(body, form.format, tts_headers(result, form.format, stored=True))
            self.counts.tts += 1
        await response(scope, replay, send)
        return None

    async def _parse(self, scope: Scope, messages: list[Message]) -> tuple[TTSForm, bytes | None] | None:
        """The form and its prompt recording's bytes if it is one the fast path may
        answer, else None (the endpoint then reads it again and says what is wrong, if
        anything is)."""
        try:
            async with Request(scope, _replay(messages, _no_receive)).form() as parsed:
                fields: dict[str, str] = {}
                upload: UploadFile | None = None
                for name, value in parsed.multi_items():
                    if not isinstance(value, str):
                        if name != "prompt_audio":
                            return None  # a file where text belongs: the endpoint says so
                        upload = value
                    elif name == "prompt_audio":
                        return None  # text where a file belongs: likewise
                    elif value:  # as FastAPI reads a form: an empty field is an absent one
                        fields[name] = value
                    else:
                        fields.pop(name, None)
                form = TTSForm.model_validate(fields)
                if form.stream or not form.cache:
                    return None  # a stream, a bypass: never a memory hit
                prompt = await read_upload(upload, "prompt_audio", self.service.config.prompt.max_upload_bytes)
        except Exception:  # an invalid field, an empty upload, a parse failure: the endpoint's to report
            return None
        return form, prompt


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
