"""The forms of ``POST /api/tts`` and ``POST /api/convert``, each declared once.

:class:`TTSForm` is both what the endpoint reads (FastAPI's form model) and what the hit
fast path validates (:mod:`lib.api.fastpath`), so the two cannot drift apart. The bounds
are :mod:`lib.request.validate`'s, in types shared with ``/v1`` (:data:`Seed`, :data:`Speed`).
Each form turns into the service's request by one method.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import UploadFile
from pydantic import BaseModel, ConfigDict, Field

from lib.request.types import ConvertRequest, TTSRequest
from lib.request.validate import MAX_SEED, MAX_SPEED, MAX_TTL, MIN_SPEED

__all__ = ["ConvertForm", "Format", "Mode", "Seed", "Speed", "TTSForm"]

#: The formats of ``/api`` (lib.audio.pcm.MIME_TYPES): pcm is raw 16-bit mono at X-Sample-Rate.
Format = Literal["wav", "mp3", "flac", "ogg", "opus", "aac", "pcm"]
Mode = Literal["zero_shot", "cross_lingual", "instruct", "preset"]

Seed = Annotated[int, Field(ge=0, le=MAX_SEED)]
Speed = Annotated[float, Field(ge=MIN_SPEED, le=MAX_SPEED)]
_Cache = Annotated[bool, Field(description="false bypasses the cache (no read, no write)")]
_Store = Annotated[bool, Field(description="false never writes the result (personal data)")]
_TTL = Annotated[float | None, Field(gt=0, le=MAX_TTL, allow_inf_nan=False, description="Seconds this entry lives")]


class TTSForm(BaseModel):
    """The form of ``POST /api/tts`` (multipart or urlencoded). An empty field counts
    as an absent one, as FastAPI reads forms."""

    model_config = ConfigDict(extra="ignore")

    text: str = Field(description="The text to speak (normalised before keying)")
    prompt_audio: UploadFile | None = Field(None, description="Prompt voice recording, 1-30 s")
    voice: str | None = Field(None, description="A saved or preset voice, instead of prompt_audio")
    prompt_text: str = Field("", description="Transcript of the prompt (zero-shot mode)")
    style: str = Field("", description="Style instruction, e.g. 'slow, calm' or '开心'")
    seed: Seed | None = Field(
        None, description="Omit for the phrase's approved take (X-Take: approved) if it has one, else seed 0"
    )
    speed: Speed = 1.0
    mode: Mode | None = Field(None, description="Omit to pick from the other fields")
    format: Format = Field(
        "wav", description="opus: Ogg Opus (24 kHz); aac: ADTS; pcm: raw 16-bit mono at X-Sample-Rate"
    )
    cache: _Cache = True
    store: _Store = True
    ttl: _TTL = None
    stream: bool = Field(False, description="true: chunked audio (wav, pcm or mp3), each sentence as soon as it exists")

    def request(self, prompt_audio: bytes | None) -> TTSRequest:
        """The service's request (``prompt_audio``: the upload's bytes, read by the caller)."""
        return TTSRequest(
            text=self.text, prompt_audio=prompt_audio, voice=self.voice or None, prompt_text=self.prompt_text,
            style=self.style, seed=self.seed, speed=self.speed, mode=self.mode, format=self.format,
            use_cache=self.cache, store=self.store, ttl=self.ttl,
        )  # fmt: skip


class ConvertForm(BaseModel):
    """The form of ``POST /api/convert`` (multipart)."""

    model_config = ConfigDict(extra="ignore")

    source_audio: UploadFile = Field(description="The recording whose words are spoken, 1-30 s")
    prompt_audio: UploadFile | None = Field(None, description="The target voice, as a recording")
    voice: str | None = Field(None, description="The target voice: a saved or preset voice name")
    seed: Seed = 0
    speed: Speed = 1.0
    format: Format = "wav"
    cache: _Cache = True
    store: _Store = True
    ttl: _TTL = None

    def request(self, source: bytes, target: bytes | None) -> ConvertRequest:
        """The service's request (the uploads' bytes, read by the caller)."""
        return ConvertRequest(
            source_audio=source, prompt_audio=target, voice=self.voice or None, seed=self.seed, speed=self.speed,
            format=self.format, use_cache=self.cache, store=self.store, ttl=self.ttl,
        )  # fmt: skip
