"""A synthesis request as callers give it, its validation, and the resolved form the
cache is keyed on."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Union

from numpy.typing import NDArray

from lib.audio import PromptAudio
from lib.cache.keys import KeyFields

__all__ = ["CONVERT", "ConvertRequest", "PromptSource", "Resolved", "TTSRequest"]

#: The mode of a conversion (speech to speech) in keys and entries.
CONVERT = "convert"

#: Prompt audio: a file path, the raw bytes of an audio file, or (sample_rate, samples).
PromptSource = Union[str, "os.PathLike[str]", bytes, tuple[int, NDArray[Any]]]


@dataclass(frozen=True)
class TTSRequest:
    """What a caller asks for. Validated and normalised by the service."""

    text: str
    prompt_audio: PromptSource | None = None
    """Prompt voice recording; or use ``voice``."""
    prompt_text: str = ""
    """Transcript of the prompt (zero-shot mode)."""
    voice: str | None = None
    """A saved voice or a preset voice, by name, instead of ``prompt_audio``."""
    style: str = ""
    """Style instruction, e.g. "slow, calm" or "开心"."""
    seed: int = 0
    speed: float = 1.0
    mode: str | None = None
    """zero_shot, cross_lingual, instruct, preset; None picks from the other fields."""
    format: str = "wav"
    use_cache: bool = True
    """False bypasses the cache entirely: no read, no write."""
    store: bool = True
    """False reads the cache but never writes (personal data)."""
    ttl: float | None = None
    """Seconds this entry lives (overrides cache.ttl)."""
    origin: str = "user"
    """``user`` or ``preload``: counted apart in the statistics (not part of the key)."""


@dataclass(frozen=True)
class ConvertRequest:
    """Convert mode: the words of ``source_audio`` spoken in another voice (the target:
    ``prompt_audio``, or a saved or preset ``voice``)."""

    source_audio: PromptSource
    """The recording to re-speak."""
    prompt_audio: PromptSource | None = None
    voice: str | None = None
    seed: int = 0
    speed: float = 1.0
    format: str = "wav"
    use_cache: bool = True
    store: bool = True
    ttl: float | None = None
    origin: str = "user"


@dataclass(frozen=True)
class Resolved:
    """A validated request: ``fields`` is exactly what the engine will receive."""

    fields: KeyFields
    key: str
    prompt: PromptAudio | None
    """Prompt PCM for prompt voices; None for preset voices."""
    preset: str | None
    voice_name: str
    """The voice as the caller named it (preset or saved voice), "" for an uploaded prompt."""
    format: str
    use_cache: bool
    store: bool
    ttl: float | None
    """Effective time-to-live in seconds (the request's, else ``cache.ttl``)."""
    source: PromptAudio | None = None
    """Convert mode: the recording to re-speak (canonical PCM)."""
    origin: str = "user"
    """``user`` or ``preload`` (the eviction policy counts only users' requests)."""
