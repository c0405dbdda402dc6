"""The configuration sections of long texts and templates (``segments:`` and
``templates:`` in config.yaml), beside :mod:`lib.config`, which reads them."""

from __future__ import annotations

from dataclasses import dataclass

from lib.errors import ConfigError

__all__ = ["SegmentsConfig", "TemplatesConfig"]


@dataclass(frozen=True)
class SegmentsConfig:
    """Long texts in sentence segments, and how every result is finished (``segments:``)."""

    max_chars: int = 80
    """Longest segment; a longer sentence is cut at a comma, else a space."""
    pause_sentence: float = 0.3
    """Seconds of silence after a segment that ends a sentence (。！？.!?)."""
    pause_clause: float = 0.15
    """Seconds of silence after a segment cut at a comma or a space."""
    crossfade: float = 0.01
    """Seconds of fade at every join (a crossfade where there is no pause)."""
    tail: float = 0.2
    """Seconds of silence at the end of every result."""
    loudness: float | None = -16.0
    """Loudness target of every result in LUFS (ITU-R BS.1770); null leaves the
    engine's levels."""

    def __post_init__(self) -> None:
        # Checks of this section live beside its fields.
        rules = [
            (10 <= self.max_chars <= 1000, f"segments.max_chars: must be 10 to 1000, got {self.max_chars}"),
            (0 <= self.pause_sentence <= 3, f"segments.pause_sentence: must be 0 to 3 s, got {self.pause_sentence}"),
            (0 <= self.pause_clause <= 3, f"segments.pause_clause: must be 0 to 3 s, got {self.pause_clause}"),
            (0 <= self.crossfade <= 0.1, f"segments.crossfade: must be 0 to 0.1 s, got {self.crossfade}"),
            (0 <= self.tail <= 5, f"segments.tail: must be 0 to 5 s, got {self.tail}"),
            (
                self.loudness is None or -40 <= self.loudness <= -5,
                f"segments.loudness: must be -40 to -5 LUFS or null, got {self.loudness}",
            ),
        ]
        for ok, message in rules:
            if not ok:
                raise ConfigError(message)


@dataclass(frozen=True)
class TemplatesConfig:
    """Slot templates answered from cached pieces (``templates:``)."""

    file: str | None = "hot_phrases.json"
    """Phrase file whose ``templates`` the service answers, relative to the working
    directory; a missing file means no templates; null turns them off."""
    char_gap: float = 0.06
    """Seconds between the characters of a slot read character by character."""

    def __post_init__(self) -> None:
        if self.file is not None and not self.file.strip():
            raise ConfigError("templates.file: must not be empty; give a path or leave it null")
        if not 0 <= self.char_gap <= 1:
            raise ConfigError(f"templates.char_gap: must be 0 to 1 s, got {self.char_gap}")
