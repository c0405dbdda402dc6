"""The OpenAI-compatible API under ``/v1``: speech (audio and SSE), models, voices and
consents. Errors are OpenAI's error object (:mod:`lib.api.errors`)."""

from __future__ import annotations

from fastapi import APIRouter

from lib.service import TTSService

from .models import models_router
from .speech import SpeechRequest, VoiceRef, speech_router
from .voices import voices_router

__all__ = ["SpeechRequest", "VoiceRef", "v1_router"]


def v1_router(service: TTSService) -> APIRouter:
    """Every ``/v1`` route over ``service``."""
    router = APIRouter()
    for part in (speech_router(service), models_router(service), voices_router(service)):
        router.include_router(part)
    return router
