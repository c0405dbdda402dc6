"""Input validation, in one place. Every entry point (HTTP API, web UI, preload,
``synthesise_with_cache``) goes through these functions, so one rule gives one message
everywhere. Each message names the field as the caller sees it and says how to fix it.
The bounds here are the ones the HTTP forms declare (:mod:`lib.api.forms`), and each
field of a request is checked once (:func:`check_request`, :func:`check_delivery`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from lib.audio.pcm import FORMATS, PromptAudio
from lib.config import MAX_TTL, AppConfig
from lib.core.logtext import cut_text
from lib.engines.base import MODES
from lib.errors import PromptAudioError, ValidationError
from lib.request.types import Delivery, TTSRequest
from lib.text.normalise import normalise_text

__all__ = [
    "DEFAULT_SEED",
    "MAX_SEED",
    "MAX_SPEED",
    "MAX_TTL",
    "MIN_SPEED",
    "Checked",
    "check_delivery",
    "check_format",
    "check_mode",
    "check_prompt",
    "check_request",
    "check_seed",
    "check_speed",
    "check_text",
    "check_ttl",
    "check_unicode",
    "normalise_fields",
]

MAX_SEED = 2**32 - 1
DEFAULT_SEED = 0
"""The seed of a request that names none (and has no approved take): its key is the one
naming this seed has."""
#: OpenAI's range (0.25-4.0): the engines time-stretch (builtin: espeak's rate within 80-450 words
#: a minute, the rest by WORLD resynthesis; bench figures in docs/openai.md).
MIN_SPEED, MAX_SPEED = 0.25, 4.0
_END_OF_PROMPT = "<|endofprompt|>"


def check_seed(value: Any, field: str = "seed") -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValidationError(f"{field}: must be a whole number from 0 to {MAX_SEED}, got {cut_text(repr(value))}")
    if not 0 <= int(value) <= MAX_SEED:
        raise ValidationError(f"{field}: {value} is out of range; use 0 to {MAX_SEED}")
    return int(value)


def check_speed(value: Any, field: str = "speed") -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise ValidationError(f"{field}: must be a number from {MIN_SPEED} to {MAX_SPEED}, got {cut_text(repr(value))}")
    speed = float(value)
    if not math.isfinite(speed) or not MIN_SPEED <= speed <= MAX_SPEED:
        raise ValidationError(f"{field}: {value} is out of range; use {MIN_SPEED} to {MAX_SPEED}")
    return speed


def check_ttl(value: Any, field: str = "ttl") -> float | None:
    """None (the configured default) or positive, finite seconds up to :data:`MAX_TTL`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise ValidationError(f"{field}: must be a positive number of seconds (leave it out to keep the entry)")
    if value > MAX_TTL:
        raise ValidationError(f"{field}: {value:g} s is over the maximum of {MAX_TTL:g} s (10 years); leave it out")
    return float(value)


def check_format(value: Any) -> str:
    if value not in FORMATS:
        raise ValidationError(f"format: {cut_text(repr(value))} is not supported; use one of {', '.join(FORMATS)}")
    return str(value)


def check_mode(value: Any) -> str | None:
    if value is not None and value not in MODES:
        raise ValidationError(f"mode: {cut_text(repr(value))} is not a mode; use one of {', '.join(MODES)}")
    return None if value is None else str(value)


def check_text(value: Any, field: str, config: AppConfig, *, limit: int | None = None, fold: bool = True) -> str:
    """Normalised text; refuses non-strings, text that is not valid Unicode (lone
    surrogates cannot be encoded, stored or spoken) and text over ``limit``."""
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise ValidationError(f"{field}: must be text")
    check_unicode(value, field)
    t = config.text
    text = normalise_text(value, fold_punctuation=fold and t.fold_punctuation, casefold=fold and t.casefold)
    limit = t.max_chars if limit is None else limit
    if len(text) > limit:
        raise ValidationError(
            f"{field}: is {len(text)} characters, over the limit of {limit}; "
            "shorten it or split it into several requests"
        )
    return text


def check_unicode(value: str | None, field: str) -> None:
    """Refuse text that cannot be encoded (a lone surrogate such as ``"\\ud800"``,
    which JSON can carry): it can be neither keyed, stored nor spoken."""
    if not value:
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError(
            f"{field}: contains a character that is not valid Unicode (position {exc.start}); remove it"
        ) from exc


def normalise_fields(request: TTSRequest, config: AppConfig) -> tuple[str, str, str]:
    """Validate the text fields of a :class:`lib.request.types.TTSRequest`; return the
    normalised (text, prompt_text, style)."""
    text = check_text(request.text, "text", config)
    if not text:
        raise ValidationError("text: is empty; type the words to speak")
    prompt_text = check_text(request.prompt_text, "prompt_text", config)
    style = check_text(request.style, "style", config, limit=10**9, fold=False)
    if style.endswith(_END_OF_PROMPT):
        style = style[: -len(_END_OF_PROMPT)].strip()
    if len(style) > config.text.max_style_chars:
        raise ValidationError(
            f"style: is {len(style)} characters, over the limit of {config.text.max_style_chars}; "
            "shorten the instruction"
        )
    return text, prompt_text, style


@dataclass(frozen=True)
class Checked:
    """The scalar fields of a :class:`lib.request.types.TTSRequest`, checked and normalised
    (its voice and its mode's fit are the resolver's: :mod:`lib.pipeline.resolve`)."""

    text: str
    prompt_text: str
    style: str
    seed: int
    """The request's seed, or :data:`DEFAULT_SEED` when it named none."""
    speed: float
    """Rounded to 3 decimals, as keys hold it."""
    mode: str | None
    delivery: Delivery
    seeded: bool = True
    """Whether the request named its seed."""


def check_request(request: TTSRequest, config: AppConfig) -> Checked:
    """Every field of ``request`` but its voice, each checked once, in this order: text,
    prompt_text, style, seed, speed, format, mode, ttl."""
    text, prompt_text, style = normalise_fields(request, config)
    seeded = request.seed is not None
    seed = check_seed(request.seed) if seeded else DEFAULT_SEED
    speed = round(check_speed(request.speed), 3)
    fmt = check_format(request.format)
    mode = check_mode(request.mode)
    delivery = _delivery(request, fmt, check_ttl(request.ttl), config)
    return Checked(text, prompt_text, style, seed, speed, mode, delivery, seeded)


def check_delivery(request: Delivery, config: AppConfig) -> Delivery:
    """The delivery settings of a request (format, then ttl), checked; ``ttl`` is the
    request's, else ``cache.ttl``."""
    fmt = check_format(request.format)
    return _delivery(request, fmt, check_ttl(request.ttl), config)


def _delivery(request: Delivery, fmt: str, ttl: float | None, config: AppConfig) -> Delivery:
    return Delivery(
        format=fmt,
        use_cache=bool(request.use_cache),
        store=bool(request.store),
        ttl=ttl if ttl is not None else config.cache.ttl,
        origin="preload" if request.origin == "preload" else "user",
    )


def check_prompt(prompt: PromptAudio, config: AppConfig, field: str = "prompt audio") -> None:
    """Reject recordings too short, too long or silent (HTTP 422)."""
    p = config.prompt
    seconds = prompt.seconds
    if seconds < p.min_seconds:
        raise PromptAudioError(f"{field} is {seconds:.2f} s long; record at least {p.min_seconds:g} s of clear speech")
    if seconds > p.max_seconds:
        raise PromptAudioError(f"{field} is {seconds:.1f} s long; trim it to at most {p.max_seconds:g} s")
    pcm = prompt.pcm.astype(np.float64)
    rms = float(np.sqrt(np.mean(pcm * pcm))) / 32768.0
    if rms < 1e-3:  # about -60 dBFS
        raise PromptAudioError(f"{field} is silent; record the voice closer to the microphone")
