"""``provenance:``: the implicit labels every audio file served carries
(:mod:`lib.audio.provenance` writes them)."""

from __future__ import annotations

from dataclasses import dataclass

from lib.errors import ConfigError

__all__ = ["ProvenanceConfig"]


@dataclass(frozen=True)
class ProvenanceConfig:
    """Implicit labels in every audio file served (``provenance:``)."""

    labels: bool = True
    """Write metadata saying the audio is AI-generated, by whom, which content and which
    model, into every file served (WAV LIST/INFO, ID3v2 in MP3 and AAC, Vorbis comments
    in FLAC, Ogg Vorbis and Ogg Opus). Raw ``pcm`` has no container to carry it."""
    provider: str = "voice-tts"
    """The service provider named in the labels (GB 45438 ``ContentProducer``): your
    organisation's name, or its filing number."""

    def __post_init__(self) -> None:
        name = self.provider
        if not name.strip() or len(name) > 200:
            raise ConfigError("provenance.provider: give a name of 1-200 characters (your organisation)")
        if any(ord(c) < 32 or c in "\x7f=" for c in name):
            raise ConfigError("provenance.provider: must be one line of text without control characters or '='")

    @property
    def active_provider(self) -> str | None:
        """The provider to record in new entries, or None when labels are off."""
        return self.provider.strip() if self.labels else None
