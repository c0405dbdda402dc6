"""A trivial deterministic engine for tests and benchmarks of the cache logic.

It "speaks" a tone whose pitch is derived from the text, the voice and the seed, about
60 ms per character. It can be made slow (``delay``) or made to fail (``fail``), and it
counts its calls, which is how tests prove hits and single-flight.
"""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lib.engines.base import MODES, Synthesis, VoiceProfile
from lib.errors import EngineError, NotFoundError
from lib.text.tokens import Reading

__all__ = ["ToneEngine"]

_PRESETS = {"tone-low": 110.0, "tone-high": 330.0}


class ToneEngine:
    """Deterministic tone synthesiser implementing :class:`lib.engines.base.Engine`."""

    name = "tone"
    model_version = "tone-1"
    sample_rate = 22_050
    modes = frozenset(MODES)
    style_modes = frozenset(MODES)
    concurrent_calls = None
    """Calls the engine watchdog admits at once: no limit (the tone takes no lock)."""

    def __init__(self, *, delay: float = 0.0, seconds_per_char: float = 0.06) -> None:
        self.delay = delay
        self.seconds_per_char = seconds_per_char
        self.fail: Exception | None = None
        """When set, every synthesis raises it (tests of "failures are not cached")."""
        self.output_override: NDArray[Any] | None = None
        """When set, returned instead of the tone (tests of bad engine output)."""
        self.calls = 0
        self.extract_calls = 0
        self.readings: list[Reading] = []
        """Every reading it was given, in order."""
        self._lock = threading.Lock()

    def presets(self) -> list[str]:
        return sorted(_PRESETS)

    def preset_voice(self, name: str) -> VoiceProfile:
        if name not in _PRESETS:
            raise NotFoundError(f"unknown preset voice {name!r}; use one of {', '.join(sorted(_PRESETS))}")
        return VoiceProfile(self.name, self.model_version, "preset", {"base_hz": _PRESETS[name]})

    def extract_voice(self, prompt_pcm: NDArray[Any], prompt_text: str) -> VoiceProfile:
        with self._lock:
            self.extract_calls += 1
        level = float(np.abs(prompt_pcm.astype(np.float64)).mean()) if prompt_pcm.size else 0.0
        return VoiceProfile(self.name, self.model_version, "prompt", {"base_hz": 120.0 + level % 200.0})

    def synthesise(
        self, text: str, voice: VoiceProfile, *, style: str, seed: int, speed: float, mode: str,
        reading: Reading | None = None,
    ) -> Synthesis:  # fmt: skip
        """A tone pitched by the text (not by ``reading``, which it only records in
        :attr:`readings`: tests of the request path check what an engine is given)."""
        with self._lock:
            self.calls += 1
            if reading is not None:
                self.readings.append(reading)
        if self.delay:
            time.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        if self.output_override is not None:
            return Synthesis(self.output_override)
        if not text:
            raise EngineError("nothing to say")
        digest = hashlib.md5(f"{text}|{style}|{seed}|{mode}".encode()).digest()
        hz = float(voice.params.get("base_hz", 150.0)) + digest[0]
        n = int(self.sample_rate * self.seconds_per_char * len(text) / speed)
        t = np.arange(n, dtype=np.float64) / self.sample_rate
        audio = 0.3 * np.sin(2 * np.pi * hz * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))
        return Synthesis(audio.astype(np.float32), {"hz": round(hz, 1)})

    def convert(self, source_pcm: NDArray[Any], voice: VoiceProfile, *, seed: int, speed: float) -> Synthesis:
        """A tone as long as the source (divided by ``speed``), pitched by the voice."""
        with self._lock:
            self.calls += 1
        if self.delay:
            time.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        digest = hashlib.md5(np.ascontiguousarray(source_pcm).tobytes() + str(seed).encode()).digest()
        hz = float(voice.params.get("base_hz", 150.0)) + digest[0]
        n = int(self.sample_rate * source_pcm.size / 16_000 / speed)
        t = np.arange(n, dtype=np.float64) / self.sample_rate
        return Synthesis((0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32), {"hz": round(hz, 1)})

    def stream(
        self, text: str, voice: VoiceProfile, *, style: str, seed: int, speed: float, mode: str,
        reading: Reading | None = None,
    ) -> Iterator[NDArray[Any]]:  # fmt: skip
        yield self.synthesise(text, voice, style=style, seed=seed, speed=speed, mode=mode, reading=reading).audio

    def close(self) -> None:
        return None
