"""Closed-form voice profiles: what the builtin engine measures on prompt audio.

A profile is a handful of numbers, computed in one pass (well under 300 ms for 10 s):

- the pitch median (Hz) and range (10th-90th percentile span in semitones) of the voiced
  frames, from Praat's autocorrelation pitch tracker;
- a vocal-tract scale: the formant dispersion (mean of F_i / (i - 1/2) over F1-F4, the
  spacing a uniform tube of the speaker's length would have) divided by that of the
  espeak base voice, measured the same way by the engine;
- the espeak base variant: a female variant for a median above 160 Hz, else a male one,
  so the transform has less distance to cover.

Prompts that cannot be a voice raise :class:`lib.errors.PromptAudioError`: silence, too
little voiced speech, a pitch outside the human range, and stationary or tonal sounds
(a pure sine has one spectral line and no spectral change from frame to frame, which
speech never has). The service rejects some of these earlier; the engine checks anyway.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import numpy as np
import parselmouth

from lib.errors import PromptAudioError

__all__ = [
    "FEMALE_THRESHOLD_HZ",
    "PitchStats",
    "analyse_prompt",
    "formant_ceiling",
    "formant_dispersion",
    "pitch_frames",
    "pitch_stats",
]

_LOGGER = logging.getLogger(__name__)

#: A prompt whose median pitch is above this is matched from a female base voice.
FEMALE_THRESHOLD_HZ = 160.0

_PITCH_FLOOR = 60.0
_PITCH_CEILING = 500.0
_MIN_VOICED_SECONDS = 0.3


@dataclass(frozen=True)
class PitchStats:
    """Pitch statistics of voiced frames."""

    median_st: float
    """Median pitch in semitones re 1 Hz (12 * log2(Hz))."""
    range_st: float
    """10th to 90th percentile span in semitones."""
    voiced_seconds: float


def pitch_frames(samples: np.ndarray, rate: int, time_step: float = 0.01) -> tuple[np.ndarray, np.ndarray]:
    """Times (s) and pitch (Hz) of the voiced frames, from Praat's ``To Pitch (ac)``."""
    sound = parselmouth.Sound(np.ascontiguousarray(samples, dtype=np.float64), float(rate))
    pitch = sound.to_pitch_ac(time_step=time_step, pitch_floor=_PITCH_FLOOR, pitch_ceiling=_PITCH_CEILING)
    hz = np.asarray(pitch.selected_array["frequency"], dtype=np.float64)
    times = np.asarray(pitch.xs(), dtype=np.float64)
    voiced = hz > 0
    return times[voiced], hz[voiced]


def pitch_stats(hz: np.ndarray, time_step: float = 0.01) -> PitchStats | None:
    """Statistics of voiced pitch values; ``None`` when there are too few."""
    if hz.size < 5:
        return None
    st = 12.0 * np.log2(hz)
    lo, med, hi = np.percentile(st, [10.0, 50.0, 90.0])
    return PitchStats(float(med), float(hi - lo), hz.size * time_step)


def formant_ceiling(median_hz: float) -> float:
    """Praat's recommended formant ceiling: 5000 Hz for male, 5500 Hz for female voices."""
    return 5500.0 if median_hz > FEMALE_THRESHOLD_HZ else 5000.0


def formant_dispersion(samples: np.ndarray, rate: int, ceiling: float, voiced_times: np.ndarray) -> float | None:
    """Formant dispersion (Hz) over voiced frames; ``None`` if it cannot be measured."""
    sound = parselmouth.Sound(np.ascontiguousarray(samples, dtype=np.float64), float(rate))
    formant = sound.to_formant_burg(time_step=0.02, max_number_of_formants=5.0, maximum_formant=ceiling)
    times = np.asarray(formant.xs(), dtype=np.float64)
    if voiced_times.size == 0 or times.size == 0:
        return None
    # Keep formant frames within 15 ms of a voiced pitch frame.
    idx = np.clip(np.searchsorted(voiced_times, times), 1, voiced_times.size - 1)
    near = np.minimum(np.abs(voiced_times[idx] - times), np.abs(voiced_times[idx - 1] - times)) <= 0.015
    if near.sum() < 5:
        return None
    values = []
    for i in range(1, 5):
        track = np.array([formant.get_value_at_time(i, float(t)) for t in times[near]], dtype=np.float64)
        track = track[np.isfinite(track)]
        if track.size >= 5:
            values.append(float(np.median(track)) / (i - 0.5))
    return float(np.mean(values)) if len(values) >= 3 else None


def _spectral_checks(x: np.ndarray) -> None:
    """Reject stationary or tonal sound (a sine, a hum): speech has broad, changing spectra."""
    frame, hop = 512, 256
    if x.size < frame * 4:
        raise PromptAudioError("prompt audio is too short to be a voice; record at least 1 second of speech")
    count = 1 + (x.size - frame) // hop
    idx = np.arange(frame)[None, :] + hop * np.arange(count)[:, None]
    spectra = np.abs(np.fft.rfft(x[idx] * np.hanning(frame), axis=1)) ** 2
    energy = spectra.sum(axis=1)
    loud = energy > energy.max() * 1e-3
    spectra = spectra[loud]
    if spectra.shape[0] < 4:
        raise PromptAudioError("prompt audio holds almost no sound; record at least 1 second of clear speech")
    ltas = spectra.sum(axis=0)
    top = np.sort(ltas)[-3:].sum() / ltas.sum()
    db = 10.0 * np.log10(spectra + 1e-12 * energy.max())
    flux = float(np.median(np.mean(np.abs(np.diff(db, axis=0)), axis=1)))
    if top > 0.5 or flux < 1.0:
        raise PromptAudioError(
            "prompt audio sounds like a steady tone, not speech (no spectral variety); "
            "upload a recording of a person speaking"
        )


def analyse_prompt(pcm: np.ndarray, rate: int) -> tuple[PitchStats, np.ndarray, np.ndarray]:
    """Check prompt PCM (int16 mono) and return its pitch statistics, the samples as
    float64 and the times of the voiced frames."""
    if pcm.ndim != 1:
        raise PromptAudioError("prompt audio must be mono")
    x = pcm.astype(np.float64) / 32768.0
    if x.size < rate // 2:
        raise PromptAudioError("prompt audio is too short to be a voice; record at least 1 second of speech")
    if not np.all(np.isfinite(x)) or float(np.sqrt(np.mean(x**2))) < 1e-4:
        raise PromptAudioError("prompt audio is silent; record a person speaking, close to the microphone")
    _spectral_checks(x)
    times, hz = pitch_frames(x, rate)
    stats = pitch_stats(hz)
    if stats is None or stats.voiced_seconds < _MIN_VOICED_SECONDS:
        raise PromptAudioError(
            "prompt audio has too little voiced speech to measure a voice; upload clear speech of a single speaker"
        )
    median_hz = 2.0 ** (stats.median_st / 12.0)
    if not 65.0 <= median_hz <= 450.0:
        raise PromptAudioError(f"prompt pitch ({median_hz:.0f} Hz) is outside the range of human speech")
    return stats, x, times
