"""A request as callers give it, and the resolved form the cache is keyed on.

Each field is declared once: how an answer is delivered and kept (:class:`Delivery`) is
the same for a synthesis (:class:`TTSRequest`), a conversion (:class:`ConvertRequest`)
and their resolution (:class:`Resolved`), which all extend it. Every field is a keyword.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields
from typing import Any, Union

from numpy.typing import NDArray

from lib.audio.pcm import PromptAudio
from lib.cache.keys import KeyFields

__all__ = ["CONVERT", "ConvertRequest", "Delivery", "PromptSource", "Resolved", "TTSRequest"]

#: The mode of a conversion (speech to speech) in keys and entries.
CONVERT = "convert"

#: Prompt audio: a file path, the raw bytes of an audio file, or (sample_rate, samples).
PromptSource = Union[str, "os.PathLike[str]", bytes, tuple[int, NDArray[Any]]]


@dataclass(frozen=True, kw_only=True)
class Delivery:
    """How an answer is delivered and kept. Not part of the key."""

    format: str = "wav"
    use_cache: bool = True
    """False bypasses the cache entirely: no read, no write."""
    store: bool = True
    """False reads the cache but never writes (personal data)."""
    ttl: float | None = None
    """Seconds this entry lives (overrides cache.ttl)."""
    origin: str = "user"
    """``user`` or ``preload``: counted apart in the statistics (not part of the key)."""

    @property
    def leaves_trace(self) -> bool:
        """Whether the request may leave anything behind (its audio, its prompt, its
        text): not when it bypasses the cache or asked not to be stored."""
        return bool(self.use_cache and self.store)

    def delivery(self) -> Delivery:
        """These settings alone (of a request or a resolution)."""
        return Delivery(**{f.name: getattr(self, f.name) for f in fields(Delivery)})


@dataclass(frozen=True, kw_only=True)
class TTSRequest(Delivery):
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
    seed: int | None = None
    """None: the request names no seed -- the phrase's approved take if it has one
    (lib.takes), else :data:`lib.request.validate.DEFAULT_SEED` (the same key as naming it)."""
    speed: float = 1.0
    mode: str | None = None
    """zero_shot, cross_lingual, instruct, preset; None picks from the other fields."""


@dataclass(frozen=True, kw_only=True)
class ConvertRequest(Delivery):
    """Convert mode: the words of ``source_audio`` spoken in another voice (the target:
    ``prompt_audio``, or a saved or preset ``voice``)."""

    source_audio: PromptSource
    """The recording to re-speak."""
    prompt_audio: PromptSource | None = None
    voice: str | None = None
    seed: int = 0
    speed: float = 1.0


@dataclass(frozen=True, kw_only=True)
class Resolved(Delivery):
    """A validated request: ``fields`` is exactly what the engine will receive; the
    delivery settings are checked (``ttl``: the request's, else ``cache.ttl``)."""

    fields: KeyFields
    key: str
    prompt: PromptAudio | None
    """Prompt PCM for prompt voices; None for preset voices."""
    preset: str | None
    voice_name: str
    """The voice as the caller named it (preset or saved voice), "" for an uploaded prompt."""
    source: PromptAudio | None = None
    """Convert mode: the recording to re-speak (canonical PCM)."""
    phrase: str = ""
    """The phrase the key belongs to (:func:`lib.takes.records.phrase_id`: the fields
    without seed and model version); "" for a conversion."""
    seeded: bool = True
    """Whether the request named its seed; an unseeded one gets the phrase's approved take."""
    request: TTSRequest | ConvertRequest | None = field(default=None, compare=False, repr=False)
    """What was resolved, as the caller gave it (its typed text goes to the statistics);
    the service answers a resolution as it answers its request, resolved once."""
