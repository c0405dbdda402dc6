"""The engine watchdog's section of the configuration (``watchdog:``), with its checks
beside its fields. Re-exported by :mod:`lib.config`, which reads it with the other
sections; :mod:`lib.engines.watchdog` enforces it.

Every engine call (synthesis, streaming, conversion, voice-profile extraction) gets a
deadline proportional to its work: ``timeout`` seconds, plus ``per_char`` seconds per
character of text, plus ``per_audio_second`` seconds per second of audio it reads (the
source of a conversion, the prompt of a profile extraction).
"""

from __future__ import annotations

from dataclasses import dataclass

from lib.config.load import require

__all__ = ["WatchdogConfig"]


@dataclass(frozen=True)
class WatchdogConfig:
    """Deadlines and health probes of engine calls (``watchdog:``)."""

    timeout: float = 30.0
    """Seconds every engine call may take before the allowances below; past its deadline
    a call fails (HTTP 504, nothing cached), the engine is interrupted where it can be
    (the builtin engine's espeak-ng worker is killed and replaced) and counted in
    ``tts_engine_timeouts_total``."""
    per_char: float = 0.5
    """Seconds more per character of text to speak."""
    per_audio_second: float = 5.0
    """Seconds more per second of audio the call reads (conversion source, voice prompt)."""
    probe_interval: float = 60.0
    """Seconds without any engine call after which a tiny probe synthesis checks that the
    engine still works (``/healthz`` reports what it found); 0 turns probes off."""

    def __post_init__(self) -> None:
        require(
            (0 < self.timeout <= 86400, f"watchdog.timeout: must be above 0 and at most 86400 s, got {self.timeout}"),
            (0 <= self.per_char <= 60, f"watchdog.per_char: must be 0 to 60 s, got {self.per_char}"),
            (
                0 <= self.per_audio_second <= 600,
                f"watchdog.per_audio_second: must be 0 to 600 s, got {self.per_audio_second}",
            ),
            (
                self.probe_interval == 0 or 1 <= self.probe_interval <= 86400,
                f"watchdog.probe_interval: must be 0 (off) or 1 to 86400 s, got {self.probe_interval}",
            ),
        )

    def deadline(self, *, chars: int = 0, audio_seconds: float = 0.0) -> float:
        """Seconds a call with this much work may take."""
        return self.timeout + self.per_char * max(chars, 0) + self.per_audio_second * max(audio_seconds, 0.0)
