"""``GET /v1/models`` and ``GET /v1/models/{model}``: the serving model, OpenAI's way.

One model: the configured engine, its ``id`` the engine's name, with its ``version``
(the model version its cache keys carry) and ``tag`` (``engine:model_version``, what
``POST /api/cache/clear`` evicts by). ``owned_by`` is the provider of the provenance
labels. ``GET /v1/audio/models`` says the same as ``{"models": [{"id": ...}]}``, the
shape Open WebUI asks an OpenAI-compatible speech server for.
"""

from __future__ import annotations

import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

from lib.pipeline.service import TTSService

from ..errors import error_response

__all__ = ["models_router"]


def models_router(service: TTSService) -> APIRouter:
    router = APIRouter()
    started = int(time.time())

    def model() -> dict[str, Any]:
        return {
            "id": service.engine.name,
            "object": "model",
            "created": started,
            "owned_by": service.config.provenance.provider,
            "version": service.engine.model_version,
            "tag": service.tag,
        }

    @router.get("/v1/models", tags=["openai"], summary="The serving model (OpenAI's list shape)")
    async def list_models() -> dict[str, Any]:
        return {"object": "list", "data": [model()]}

    @router.get("/v1/models/{model_id:path}", tags=["openai"], summary="One model", response_model=None)
    async def get_model(request: Request, model_id: str) -> dict[str, Any] | JSONResponse:
        found = model()
        if model_id in (found["id"], found["tag"]):
            return found
        message = f"model: {model_id!r} is not served here; GET /v1/models lists the one that is"
        return error_response(request, 404, message, param="model", code="model_not_found")

    @router.get("/v1/audio/models", tags=["openai"], summary="The serving model, as Open WebUI asks for it")
    async def audio_models() -> dict[str, Any]:
        found = model()
        return {"object": "list", "data": [found], "models": [{"id": found["id"], "name": found["id"]}]}

    return router
