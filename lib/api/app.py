"""The FastAPI application: routers, error translation, upload limit, body deadline,
405 for unsupported methods, HTTP metrics.

``create_app(service)`` returns an ASGI app. The web UI mounts its Gradio interface on
the same app (one process, one port); ``python -m lib.api`` serves the API alone.
"""

from __future__ import annotations

import time
import weakref
from typing import Any

from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from lib.batch.background import BackgroundPreload
from lib.pipeline.service import TTSService

from .admin import admin_router, preload_router
from .batch import batch_router
from .convert import convert_router
from .errors import install_error_handlers
from .fastpath import FastPathCounts, HitFastPath
from .guards import BodyTimeout, MethodGuard
from .http import UploadLimit
from .readings import readings_router
from .speech import speech_router
from .takes import takes_router
from .tenants import TenantGate, tenants_router
from .v1 import v1_routers

__all__ = ["create_app"]

#: Multipart framing and the small text fields ride on top of the prompt file itself.
_FORM_OVERHEAD = 256 * 1024


_DESCRIPTION = """\
Voice-cloning text to speech behind a result cache.

* `POST /api/tts` synthesises (or serves from the cache) and answers audio with
  `X-Cache: HIT | MISS | BYPASS | COMPOSED`, `X-Cache-Key` and `ETag`; with
  `stream=true`, chunked audio, each sentence as soon as it exists.
* `GET /api/audio/{key}.{ext}` serves a stored result in any format, immutable.
* `POST /api/reading` says how a text will be read (pinyin with tone numbers, letters,
  words); `GET/POST /api/lexicon` and `DELETE /api/lexicon/{term}` (admin) edit the
  operator's pronunciation lexicon (docs/readings.md).
* `POST /api/takes` renders a phrase's takes under distinct seeds; `POST /api/takes/approve`
  (admin) makes one the phrase's approved take, answered (`X-Take: approved`) to every
  request of the phrase that names no seed; `GET /api/takes/approved` lists them,
  `DELETE /api/takes/approved/{key}` (admin) withdraws one (docs/takes.md).
* `POST /v1/audio/speech` is OpenAI-compatible (every format, SSE, voice names; also
  `/v1/models`, `/v1/audio/voices`, `/v1/audio/voice_consents`): point an OpenAI client
  at this server (docs/openai.md).
* `GET /api/preload` reports the start-up preload (`webui.py --preload FILE`, what
  `./run.sh` starts): state, phrases done of the total, generated, cached, failed.
* `POST /api/batch` (admin) submits a list of requests as a job that every replica works
  on; `GET /api/batch/{id}` reports it, `DELETE /api/batch/{id}` cancels it (docs/batch.md).
* Errors are `{"error": "..."}` (OpenAI's error object under `/v1`).
"""


def create_app(service: TTSService, *, fast_path: bool = True, preload: BackgroundPreload | None = None) -> FastAPI:
    """The HTTP API over ``service``, under the service's own access policy (built
    once with the service: ``TTSService(..., admin_token=...)``). ``fast_path=False``
    leaves every request to the endpoints (:mod:`lib.api.fastpath`; the tests compare both).
    ``preload``: the start-up preload that ``GET /api/preload`` reports (none: ``idle``).
    """
    app = FastAPI(
        title="Voice-cloning TTS cache API",
        version="1",
        description=_DESCRIPTION,
        docs_url="/docs",
        redoc_url=None,
    )
    install_error_handlers(app)
    routers = [
        speech_router(service), *v1_routers(service), convert_router(service), admin_router(service),
        readings_router(service), takes_router(service), preload_router(preload or BackgroundPreload.none()),
        tenants_router(service), batch_router(service),
    ]  # fmt: skip
    for router in routers:
        app.include_router(router)
    all_routes = lambda: [route for router in routers for route in router.routes]  # noqa: E731
    app.state.fast_path = None
    if fast_path:
        app.state.fast_path = FastPathCounts()
        app.add_middleware(HitFastPath, service=service, routes=all_routes, counts=app.state.fast_path)
    app.add_middleware(TenantGate, service=service)  # in front of the fast path: every hit is counted too
    app.add_middleware(BodyTimeout, seconds=service.config.server.body_timeout)
    app.add_middleware(UploadLimit, limit=service.config.prompt.max_upload_bytes + _FORM_OVERHEAD)
    app.add_middleware(MethodGuard, routes=all_routes)
    app.add_middleware(_HTTPMetrics, instruments=_instruments(service.dashboard.metrics.registry))
    app.state.service = service
    app.openapi = lambda: _openapi(app)  # type: ignore[method-assign]
    return app


def _openapi(app: FastAPI) -> dict[str, Any]:
    """FastAPI documents request validation failures as 422; this API answers 400 with
    ``{"error": ...}`` (422 means unusable prompt audio here), so the schema says so."""
    if app.openapi_schema is not None:
        return app.openapi_schema
    from fastapi.openapi.utils import get_openapi

    from .errors import ERROR_RESPONSES

    schema = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    for path in schema.get("paths", {}).values():
        for operation in path.values():
            responses = operation.get("responses", {})
            if responses.get("422", {}).get("description") == "Validation Error":
                del responses["422"]
                responses.setdefault("400", ERROR_RESPONSES[400])
    components = schema.get("components", {}).get("schemas", {})
    for name in ("HTTPValidationError", "ValidationError"):
        components.pop(name, None)
    app.openapi_schema = schema
    return schema


class _Instruments:
    def __init__(self, registry: CollectorRegistry) -> None:
        self.requests = Counter(
            "tts_http_requests", "HTTP requests by route and status", ["method", "route", "status"], registry=registry
        )
        self.latency = Histogram(
            "tts_http_request_duration_seconds", "HTTP request time by route", ["route"], registry=registry,
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
        )  # fmt: skip


_BY_REGISTRY: weakref.WeakKeyDictionary[CollectorRegistry, _Instruments] = weakref.WeakKeyDictionary()


def _instruments(registry: CollectorRegistry) -> _Instruments:
    # One set per registry: building a second app over the same service reuses them.
    found = _BY_REGISTRY.get(registry)
    if found is None:
        found = _BY_REGISTRY[registry] = _Instruments(registry)
    return found


class _HTTPMetrics:
    """Counts requests by route template (never by raw path: bounded label values)."""

    def __init__(self, app: ASGIApp, instruments: _Instruments) -> None:
        self.app = app
        self.instruments = instruments
        # The labelled children, found once: ``labels()`` validates and locks on every call.
        self._counters: dict[tuple[str, str, int], Any] = {}
        self._timers: dict[str, Any] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def watched(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, watched)
        finally:
            route = getattr(scope.get("route"), "path", None) or "unmatched"
            counter = self._counters.get((scope["method"], route, status))
            if counter is None:
                counter = self.instruments.requests.labels(scope["method"], route, str(status))
                if len(self._counters) < 4096:  # bounded, as the label values are
                    self._counters[(scope["method"], route, status)] = counter
            counter.inc()
            timer = self._timers.get(route)
            if timer is None:
                timer = self._timers[route] = self.instruments.latency.labels(route)
            timer.observe(time.perf_counter() - started)
