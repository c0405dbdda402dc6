"""An engine seen through the watchdog: the same interface, every call under a deadline.

The service hands this, not the engine itself, to everything that calls the engine --
the producer (synthesis, streaming, conversion) and the voice profiles (extraction) --
so no engine call anywhere escapes :class:`lib.engines.watchdog.Watchdog`. Reading the engine's
attributes (name, model version, modes, presets) goes straight through.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lib.engines.base import PROMPT_SAMPLE_RATE, Engine, Synthesis, VoiceConverter, VoiceProfile, can_convert
from lib.engines.watchdog import Watchdog
from lib.errors import EngineError
from lib.text.tokens import Reading

__all__ = ["WatchedEngine"]

_LOGGER = logging.getLogger(__name__)


#: The engine's one-time load (the builtin engine's Kokoro model and its load-time
#: check) may take this many times ``watchdog.timeout``, under a deadline of its own,
#: before the first call's deadline starts: that call is not failed for being the first
#: (on a loaded 2-core machine the load and check took over 30 s once).
LOAD_FACTOR = 4.0


def _chars(text: str, speed: float) -> int:
    """Characters of work: a slower reading is longer audio, so it is allowed more time."""
    slower = 1.0 / speed if isinstance(speed, (int, float)) and 0 < speed < 1 else 1.0
    return int(len(text) * slower)


def _seconds(pcm: NDArray[Any]) -> float:
    return float(np.asarray(pcm).size) / PROMPT_SAMPLE_RATE


class WatchedEngine:
    """``engine`` with every call through ``watchdog``; implements :class:`Engine` and,
    when ``engine`` converts, :class:`lib.engines.base.VoiceConverter`."""

    def __init__(self, engine: Engine, watchdog: Watchdog) -> None:
        self.inner = engine
        self.watchdog = watchdog
        self.name = engine.name
        self.model_version = engine.model_version
        self.sample_rate = engine.sample_rate
        self.modes = engine.modes
        self.style_modes = engine.style_modes
        self._loaded = threading.Event()

    def _load(self) -> None:
        """The engine's ``warm()`` (its one-time load), if it has one and it has not run,
        under its own deadline (:data:`LOAD_FACTOR`)."""
        if self._loaded.is_set():
            return
        warm = getattr(self.inner, "warm", None)
        if callable(warm):
            self.watchdog.run("load", self.watchdog.config.timeout * LOAD_FACTOR, warm)
        self._loaded.set()

    @property
    def converts(self) -> bool:
        return can_convert(self.inner)

    def presets(self) -> list[str]:
        return self.inner.presets()

    def preset_voice(self, name: str) -> VoiceProfile:
        return self.inner.preset_voice(name)

    def extract_voice(self, prompt_pcm: NDArray[Any], prompt_text: str) -> VoiceProfile:
        deadline = self.watchdog.config.deadline(audio_seconds=_seconds(prompt_pcm))
        return self.watchdog.run("extract_voice", deadline, lambda: self.inner.extract_voice(prompt_pcm, prompt_text))

    def synthesise(
        self, text: str, voice: VoiceProfile, *, style: str, seed: int, speed: float, mode: str,
        reading: Reading | None = None,
    ) -> Synthesis:  # fmt: skip
        self._load()
        deadline = self.watchdog.config.deadline(chars=_chars(text, speed))
        return self.watchdog.run(
            "synthesise", deadline,
            lambda: self.inner.synthesise(text, voice, style=style, seed=seed, speed=speed, mode=mode, reading=reading),
        )  # fmt: skip

    def stream(
        self, text: str, voice: VoiceProfile, *, style: str, seed: int, speed: float, mode: str,
        reading: Reading | None = None,
    ) -> Iterator[NDArray[Any]]:  # fmt: skip
        self._load()
        deadline = self.watchdog.config.deadline(chars=_chars(text, speed))
        return self.watchdog.iterate(
            "stream", deadline,
            lambda: self.inner.stream(text, voice, style=style, seed=seed, speed=speed, mode=mode, reading=reading),
        )  # fmt: skip

    def convert(self, source_pcm: NDArray[Any], voice: VoiceProfile, *, seed: int, speed: float) -> Synthesis:
        inner = self.inner
        if not (can_convert(inner) and isinstance(inner, VoiceConverter)):
            raise EngineError(f"the {self.name} engine cannot convert recordings")
        self._load()
        seconds = _seconds(source_pcm)
        if isinstance(speed, (int, float)) and 0 < speed < 1:
            seconds /= speed
        return self.watchdog.run(
            "convert", self.watchdog.config.deadline(audio_seconds=seconds),
            lambda: inner.convert(source_pcm, voice, seed=seed, speed=speed),
        )  # fmt: skip

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:
        # Anything else an engine offers (check, family, native_stream...) reads through.
        return getattr(self.inner, name)
