"""A synthesis request as callers give it, its validation, and the resolved form the
cache is keyed on."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any, Union

import numpy as np
from numpy.typing import NDArray

from lib.audio import FORMATS, PromptAudio
from lib.config import AppConfig
from lib.engines.base import MODES
from lib.errors import PromptAudioError, ValidationError
from lib.keys import KeyFields
from lib.textnorm import normalise_text

__all__ = ["MAX_SEED", "PromptSource", "Resolved", "TTSRequest", "check_prompt", "normalise_fields"]

MAX_SEED = 2**32 - 1
MIN_SPEED, MAX_SPEED = 0.5, 2.0
_END_OF_PROMPT = "<|endofprompt|>"

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


@dataclass(frozen=True)
class Resolved:
    """A validated request: ``fields`` is exactly what the engine will receive."""

    fields: KeyFields
    key: str
    prompt: PromptAudio | None
    """Prompt PCM for prompt voices; None for preset voices."""
    preset: str | None
    format: str
    use_cache: bool
    store: bool
    ttl: float | None


def normalise_fields(request: TTSRequest, config: AppConfig) -> tuple[str, str, str]:
    """Validate the scalar fields; return normalised (text, prompt_text, style)."""
    t = config.text
    if not isinstance(request.text, str):
        raise ValidationError("text: must be a string")
    text = normalise_text(request.text, fold_punctuation=t.fold_punctuation, casefold=t.casefold)
    if not text:
        raise ValidationError("text: is empty; type the words to speak")
    if len(text) > t.max_chars:
        raise ValidationError(
            f"text: is {len(text)} characters, over the limit of {t.max_chars}; split it into shorter requests"
        )
    prompt_text = normalise_text(request.prompt_text or "", fold_punctuation=t.fold_punctuation, casefold=t.casefold)
    if len(prompt_text) > t.max_chars:
        raise ValidationError(f"prompt_text: is over the limit of {t.max_chars} characters")
    style = normalise_text(request.style or "")
    if style.endswith(_END_OF_PROMPT):
        style = style[: -len(_END_OF_PROMPT)].strip()
    if len(style) > t.max_style_chars:
        raise ValidationError(
            f"style: is {len(style)} characters, over the limit of {t.max_style_chars}; shorten the instruction"
        )
    if isinstance(request.seed, bool) or not isinstance(request.seed, (int, np.integer)):
        raise ValidationError(f"seed: must be a whole number from 0 to {MAX_SEED}")
    if not 0 <= int(request.seed) <= MAX_SEED:
        raise ValidationError(f"seed: {request.seed} is out of range; use 0 to {MAX_SEED}")
    speed = request.speed
    if isinstance(speed, bool) or not isinstance(speed, (int, float)) or not math.isfinite(speed):
        raise ValidationError(f"speed: must be a number from {MIN_SPEED} to {MAX_SPEED}")
    if not MIN_SPEED <= float(speed) <= MAX_SPEED:
        raise ValidationError(f"speed: {speed} is out of range; use {MIN_SPEED} to {MAX_SPEED}")
    if request.format not in FORMATS:
        raise ValidationError(f"format: {request.format!r} is not supported; use one of {', '.join(FORMATS)}")
    if request.mode is not None and request.mode not in MODES:
        raise ValidationError(f"mode: {request.mode!r} is not a mode; use one of {', '.join(MODES)}")
    if request.ttl is not None and (not isinstance(request.ttl, (int, float)) or not request.ttl > 0):
        raise ValidationError("ttl: must be a positive number of seconds")
    return text, prompt_text, style


def check_prompt(prompt: PromptAudio, config: AppConfig) -> None:
    """Reject prompts too short, too long or silent (HTTP 422)."""
    p = config.prompt
    seconds = prompt.seconds
    if seconds < p.min_seconds:
        raise PromptAudioError(
            f"prompt audio is {seconds:.2f} s long; record at least {p.min_seconds:g} s of clear speech"
        )
    if seconds > p.max_seconds:
        raise PromptAudioError(f"prompt audio is {seconds:.1f} s long; trim it to at most {p.max_seconds:g} s")
    pcm = prompt.pcm.astype(np.float64)
    rms = float(np.sqrt(np.mean(pcm * pcm))) / 32768.0
    if rms < 1e-3:  # about -60 dBFS
        raise PromptAudioError("prompt audio is silent; record the voice closer to the microphone")
