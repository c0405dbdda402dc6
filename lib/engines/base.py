"""The engine interface every synthesiser implements, and the voice profile it uses.

An engine turns (text, voice, style, seed, speed, mode) into mono float32 audio. The
expensive, prompt-dependent part is split out as ``extract_voice``: its result, a
:class:`VoiceProfile`, is serialisable and cached by ``lib.voices`` so that every later
request in the same voice reuses it.

Engines must be deterministic: the same arguments give bit-identical audio, within one
process and across processes. The service keys its cache on exactly the arguments it
passes here, so an engine must not read anything else that changes the audio (or must
fold it into ``model_version``).
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from numpy.typing import NDArray

from lib.audio import PROMPT_SAMPLE_RATE
from lib.text.tokens import Reading

__all__ = [
    "MODES",
    "PROMPT_SAMPLE_RATE",
    "Engine",
    "Synthesis",
    "VoiceConverter",
    "VoiceProfile",
    "can_convert",
]

#: Modes the service knows. An engine declares the subset it supports.
#: - ``zero_shot``: clone from prompt audio *and* its transcript.
#: - ``cross_lingual``: clone from prompt audio alone (no transcript).
#: - ``instruct``: a voice (prompt or preset) plus a style instruction.
#: - ``preset``: one of the engine's own voices, or a saved voice, by name.
MODES = ("zero_shot", "cross_lingual", "instruct", "preset")

_MAGIC = b"VPF1"


@dataclass(frozen=True)
class VoiceProfile:
    """What an engine needs to speak in one voice; the cacheable output of
    ``Engine.extract_voice`` or ``Engine.preset_voice``.

    ``params`` holds small JSON-serialisable values (pitch statistics, a base voice
    name); ``blob`` holds engine-specific binary data (for example serialised tensors).
    """

    engine: str
    """Name of the engine that made it; another engine must not use it."""
    model_version: str
    """Model version of that engine; a profile from an older model is stale."""
    kind: str
    """``"prompt"`` for a profile extracted from prompt audio, ``"preset"`` otherwise."""
    params: Mapping[str, Any] = field(default_factory=dict)
    """Small JSON-serialisable values."""
    blob: bytes = b""
    """Engine-specific binary payload."""

    @property
    def nbytes(self) -> int:
        """Approximate memory cost, for byte-bounded caches."""
        return len(self.blob) + len(json.dumps(dict(self.params))) + 128

    def to_bytes(self) -> bytes:
        """Serialise to a self-describing byte string (no pickle)."""
        head = json.dumps(
            {
                "engine": self.engine,
                "model_version": self.model_version,
                "kind": self.kind,
                "params": dict(self.params),
            },
            sort_keys=True,
            ensure_ascii=False,
        ).encode("utf-8")
        return _MAGIC + struct.pack("<I", len(head)) + head + self.blob

    @classmethod
    def from_bytes(cls, data: bytes) -> VoiceProfile:
        """Inverse of :meth:`to_bytes`; raises ``ValueError`` on damaged data."""
        if len(data) < 8 or data[:4] != _MAGIC:
            raise ValueError("not a serialised voice profile")
        (size,) = struct.unpack("<I", data[4:8])
        if 8 + size > len(data):
            raise ValueError("truncated voice profile")
        head = json.loads(data[8 : 8 + size].decode("utf-8"))
        return cls(
            engine=head["engine"],
            model_version=head["model_version"],
            kind=head["kind"],
            params=head["params"],
            blob=bytes(data[8 + size :]),
        )


@dataclass(frozen=True)
class Synthesis:
    """Output of one engine call."""

    audio: NDArray[Any]
    """Mono float32 samples in [-1, 1] at ``Engine.sample_rate``."""
    info: Mapping[str, Any] = field(default_factory=dict)
    """Notes for the caller, e.g. ``{"ignored_style_words": ["foo"]}``."""


@runtime_checkable
class Engine(Protocol):
    """A text-to-speech engine. Implementations live in ``lib/engines/``; heavy
    imports (torch, CosyVoice) happen inside the implementation, never at import time
    of the rest of ``lib``."""

    name: str
    """Short engine name, part of every cache key (``builtin``, ``cosyvoice``)."""
    model_version: str
    """Identifies the exact model/algorithm; part of every cache key and cache tag.
    Change it whenever the audio for the same request would change."""
    sample_rate: int
    """Sample rate of ``Synthesis.audio``."""
    modes: frozenset[str]
    """Subset of :data:`MODES` this engine supports."""
    style_modes: frozenset[str]
    """Modes in which the style instruction is used. In other modes the service drops
    the style before keying, so it cannot split the cache."""

    def presets(self) -> list[str]:
        """Names of the engine's own voices, usable without prompt audio."""
        ...

    def preset_voice(self, name: str) -> VoiceProfile:
        """Profile of a preset voice; raises ``lib.errors.NotFoundError`` if unknown."""
        ...

    def extract_voice(self, prompt_pcm: NDArray[Any], prompt_text: str) -> VoiceProfile:
        """Analyse prompt audio (mono int16 at :data:`PROMPT_SAMPLE_RATE`) and its
        transcript ("" when unknown). Raises ``lib.errors.PromptAudioError`` when the
        audio cannot be used as a voice (e.g. a pure tone)."""
        ...

    def synthesise(
        self,
        text: str,
        voice: VoiceProfile,
        *,
        style: str,
        seed: int,
        speed: float,
        mode: str,
        reading: Reading | None = None,
    ) -> Synthesis:
        """Speak ``text`` (already normalised) in ``voice``. Deterministic.

        ``reading``: the text's reading from the front end (:mod:`lib.text`, with the
        operator's lexicon applied): what the engine must say, in its own syntax, instead
        of its own guess at ``text``. The service always gives it; None (a direct call)
        lets the engine read ``text`` with the default front end."""
        ...

    def stream(
        self,
        text: str,
        voice: VoiceProfile,
        *,
        style: str,
        seed: int,
        speed: float,
        mode: str,
        reading: Reading | None = None,
    ) -> Iterator[NDArray[Any]]:
        """The same audio as :meth:`synthesise`, as float32 chunks for callers that
        stream. Engines that cannot stream yield one chunk."""
        ...

    def close(self) -> None:
        """Release resources (threads, models)."""
        ...


@runtime_checkable
class VoiceConverter(Protocol):
    """An engine that can also *convert*: re-speak a recording in another voice
    (speech to speech). Optional: the service offers the convert mode only when
    ``isinstance(engine, VoiceConverter)``. The same determinism rule holds: the same
    source, voice, seed and speed give bit-identical audio in any process."""

    def convert(self, source_pcm: NDArray[Any], voice: VoiceProfile, *, seed: int, speed: float) -> Synthesis:
        """Speak the words of ``source_pcm`` (mono int16 at :data:`PROMPT_SAMPLE_RATE`,
        already checked like a prompt) in ``voice`` (a profile from ``extract_voice`` or
        ``preset_voice``). Raises ``lib.errors.PromptAudioError`` when the source
        cannot be converted (no speech)."""
        ...


def can_convert(engine: object) -> bool:
    """Whether ``engine`` offers the convert mode: it implements :class:`VoiceConverter`
    and, where that depends on the loaded model or code, says so (``converts``)."""
    return isinstance(engine, VoiceConverter) and bool(getattr(engine, "converts", True))
