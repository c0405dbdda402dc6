"""What ``synthesise_with_cache`` returns, and where its WAV file lives."""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import tempfile
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lib.diskutil import ensure_private_dir
from lib.entry import CachedAudio

__all__ = ["Exporter", "SynthesisResult"]

_LOGGER = logging.getLogger(__name__)


class Exporter:
    """Writes results as WAV files on demand, for callers that need a path (Gradio).

    The files live outside the cache directory (so they never count against its size
    limit) in a private temporary directory, named by key, at most ``keep`` of them.
    A hit whose caller never asks for ``path`` writes nothing.
    """

    def __init__(self, cache_dir: str, keep: int = 512) -> None:
        tag = hashlib.md5(os.path.abspath(cache_dir).encode()).hexdigest()[:10]
        self.directory = Path(tempfile.gettempdir()) / f"tts-audio-{os.getuid()}-{tag}"
        self.keep = keep
        self._written = 0
        self._lock = threading.Lock()

    def path_for(self, entry: CachedAudio) -> Path:
        ensure_private_dir(self.directory)
        target = self.directory / f"{entry.key}.wav"
        if target.exists() and target.stat().st_size == len(entry.wav):
            return target
        tmp = target.with_name(f".{entry.key}.{threading.get_ident()}.tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with open(fd, "wb") as fh:
            fh.write(entry.wav)
        os.replace(tmp, target)
        with self._lock:
            self._written += 1
            trim = self._written % 64 == 0
        if trim:
            self._trim()
        return target

    def _trim(self) -> None:
        try:
            files = sorted(self.directory.glob("*.wav"), key=lambda p: p.stat().st_mtime)
        except OSError:
            return
        for old in files[: max(0, len(files) - self.keep)]:
            with contextlib.suppress(OSError):
                old.unlink()


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
    _exporter: Exporter | None = field(default=None, repr=False)
    _path: Path | None = field(default=None, repr=False)

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
        """A WAV file with this audio (written on first access)."""
        if self._path is None:
            if self._exporter is None:
                raise RuntimeError("this result has no exporter")
            self._path = self._exporter.path_for(self.audio)
        return self._path
