"""The OpenAI-compatible API under ``/v1``: speech (audio and SSE), models, voices and
consents. Errors are OpenAI's error object (:mod:`lib.api.errors`)."""

from __future__ import annotations

from fastapi import APIRouter

from lib.pipeline.service import TTSService

from .models import models_router
from .speech import SpeechRequest, VoiceRef, speech_router
from .voices import voices_router

__all__ = ["SpeechRequest", "VoiceRef", "v1_routers"]


def v1_routers(service: TTSService) -> list[APIRouter]:
    """Every ``/v1`` router over ``service``, each to include in the app as it is (the
    app's guards read the routes of the routers it includes; FastAPI keeps a router
    included in another as one opaque entry)."""
    return [speech_router(service), models_router(service), voices_router(service)]
