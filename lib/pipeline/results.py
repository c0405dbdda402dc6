"""What ``synthesise_with_cache`` returns."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lib.audio.files import ResultFiles
from lib.cache.entry import CachedAudio

__all__ = ["SynthesisResult"]


@dataclass
class SynthesisResult:
    """One answered request."""

    key: str
    """32 hex digits: the cache key."""
    cache: str
    """``HIT``, ``MISS`` or ``BYPASS``."""
    audio: CachedAudio
    timings: Mapping[str, float] = field(default_factory=dict)
    """Milliseconds: ``total`` always; ``engine`` and ``voice`` when they ran."""
    info: Mapping[str, Any] = field(default_factory=dict)
    """Engine notes, e.g. ignored style words; ``tier`` that served a hit."""
    take: str = ""
    """``approved`` when the answer is the phrase's approved take (lib.takes), else ""."""
    _files: ResultFiles | None = field(default=None, repr=False)
    _path: Path | None = field(default=None, repr=False)

    @classmethod
    def made(
        cls,
        key: str,
        cache: str,
        entry: CachedAudio,
        started: float,
        timings: Mapping[str, float],
        tier: str = "",
        files: ResultFiles | None = None,
    ) -> SynthesisResult:
        """A result, with ``total`` milliseconds since ``started`` (perf_counter)."""
        spent = dict(timings)
        spent["total"] = round((time.perf_counter() - started) * 1e3, 3)
        info = dict(entry.meta.get("info", {}))
        if tier:
            info["tier"] = tier
        return cls(key, cache, entry, spent, info, _files=files)

    @property
    def cache_hit(self) -> bool:
        return self.cache == "HIT"

    @property
    def sample_rate(self) -> int:
        return self.audio.sample_rate

    @property
    def duration(self) -> float:
        return self.audio.duration

    @property
    def wav(self) -> bytes:
        """The audio as a complete 16-bit WAV file."""
        return self.audio.wav

    @property
    def path(self) -> Path:
        """A private WAV file with this audio (written on first access)."""
        if self._path is None:
            if self._files is None:
                raise RuntimeError("this result has no file directory")
            self._path = self._files.write(f"{self.key}.wav", self.audio.wav)
        return self._path
