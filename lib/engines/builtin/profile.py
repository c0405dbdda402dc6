"""Closed-form voice profiles: what the builtin engine measures on prompt audio.

A profile is a handful of numbers, computed in one pass (about 100-150 ms of CPU for a
10 s prompt), all with WORLD (:mod:`._world`):

- the pitch median (Hz) and range (10th-90th percentile span in semitones) of the voiced
  frames, from DIO + StoneMask at 10 ms frames;
- the long-term average log spectral envelope (LTAS) of the voiced frames: CheapTrick
  envelopes averaged in the log domain, sampled on a 25 Hz grid up to 7.5 kHz (the
  canonical prompt is 16 kHz; the top of its band is shaped by the resampling filter);
- a vocal-tract (formant) scale ``r``: the frequency warp of the espeak base voice's
  LTAS that best matches the prompt's LTAS (least squares over 200-5000 Hz after
  removing a straight-line tilt, so that the microphone's slope does not count as a
  longer or shorter tract), searched on a 0.01 grid in 0.8-1.25. Why this and not
  formant tracking: averaged envelopes are stable on 3 s of speech and need no formant
  labelling; on our prompts it gives 1.25 (female vs espeak f2) and 1.03 (male vs m1),
  where a sweep of ``r`` found the similarity optimum at 1.25 and 1.05;
- an equaliser: the prompt LTAS minus the warped base LTAS, smoothed over 500 Hz,
  clamped to +-12 dB and sampled every 250 Hz, which gives the output the prompt's
  long-term spectral balance (microphone, tilt, breathiness) -- cheap, and a large part
  of what a speaker embedding hears;
- the espeak base variant: ``f2`` for a median above 160 Hz, else ``m1`` (measured:
  matched output from these bases scored highest, see :mod:`.matching`).

Prompts that cannot be a voice raise :class:`lib.errors.PromptAudioError`: silence, too
little voiced speech, a pitch outside the human range, and stationary or tonal sounds
(a pure sine has one spectral line and no spectral change from frame to frame, which
speech never has). The service rejects some of these earlier; the engine checks anyway.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lib.engines.builtin import _world
from lib.errors import PromptAudioError

__all__ = [
    "EQ_BANDS_HZ",
    "FEMALE_THRESHOLD_HZ",
    "LTAS_GRID_HZ",
    "PitchStats",
    "analyse_prompt",
    "equaliser",
    "formant_scale",
    "ltas",
    "pitch_stats",
]

_LOGGER = logging.getLogger(__name__)

#: A prompt whose median pitch is above this is matched from a female base voice.
FEMALE_THRESHOLD_HZ = 160.0
#: Frequencies (Hz) at which long-term average envelopes are compared.
LTAS_GRID_HZ = np.arange(0.0, 7500.0 + 1e-9, 25.0)
#: Band centres (Hz) of the equaliser stored in a profile; held constant above the last.
EQ_BANDS_HZ = np.arange(0.0, 7500.0 + 1e-9, 250.0)

_MIN_VOICED_SECONDS = 0.3
_FRAME_PERIOD_MS = 10.0
_MIN_SCALE, _MAX_SCALE = 0.8, 1.25
_SCALE_BAND = (200.0, 5000.0)
_EQ_SMOOTH_HZ = 500.0
_EQ_LIMIT_DB = 12.0


@dataclass(frozen=True)
class PitchStats:
    """Pitch statistics of voiced frames."""

    median_st: float
    """Median pitch in semitones re 1 Hz (12 * log2(Hz))."""
    range_st: float
    """10th to 90th percentile span in semitones."""
    voiced_seconds: float


def pitch_stats(hz: NDArray[Any], time_step: float = 0.01) -> PitchStats | None:
    """Statistics of voiced pitch values (Hz > 0); ``None`` when there are too few."""
    hz = hz[hz > 0]
    if hz.size < 5:
        return None
    st = 12.0 * np.log2(hz)
    lo, med, hi = np.percentile(st, [10.0, 50.0, 90.0])
    return PitchStats(float(med), float(hi - lo), hz.size * time_step)


def ltas(x: NDArray[Any], rate: int, f0: NDArray[Any], times: NDArray[Any]) -> NDArray[Any] | None:
    """Mean natural-log CheapTrick envelope of the voiced frames on :data:`LTAS_GRID_HZ`;
    ``None`` with fewer than 5 voiced frames."""
    voiced = f0 > 0
    if int(voiced.sum()) < 5:
        return None
    sp = _world.envelope(x, rate, f0[voiced], times[voiced])
    mean = np.log(np.maximum(sp, 1e-300)).mean(axis=0)
    freqs = np.arange(mean.size) * (rate / _world.FFT_SIZE)
    return np.asarray(np.interp(LTAS_GRID_HZ, freqs, mean), dtype=np.float64)


def _detrended_error(diff: NDArray[Any], f: NDArray[Any]) -> float:
    """Mean square of ``diff`` after removing its least-squares straight line in ``f``
    (closed form with plain sums: no BLAS, so no thread-dependent rounding)."""
    fm, dm = float(f.mean()), float(diff.mean())
    fc = f - fm
    slope = float((fc * (diff - dm)).sum() / (fc * fc).sum())
    residual = diff - dm - slope * fc
    return float((residual * residual).mean())


def formant_scale(prompt: NDArray[Any], base: NDArray[Any]) -> float:
    """Frequency scale ``r`` (prompt formants ~ r x base formants) between two LTAS."""
    band = (_SCALE_BAND[0] <= LTAS_GRID_HZ) & (_SCALE_BAND[1] >= LTAS_GRID_HZ)
    f = LTAS_GRID_HZ[band]
    best_err, best = np.inf, 1.0
    for step in range(round(_MIN_SCALE * 100), round(_MAX_SCALE * 100) + 1):
        r = step / 100.0
        warped = np.interp(LTAS_GRID_HZ, LTAS_GRID_HZ * r, base)
        err = _detrended_error(prompt[band] - warped[band], f)
        if err < best_err:
            best_err, best = err, r
    return best


def equaliser(prompt: NDArray[Any], base: NDArray[Any], scale: float) -> list[float]:
    """Gains (dB) at :data:`EQ_BANDS_HZ` that turn the base LTAS warped by ``scale``
    into the prompt's, smoothed and limited; their mean is 0 dB (level is set later)."""
    warped = np.interp(LTAS_GRID_HZ, LTAS_GRID_HZ * scale, base)
    # ``prompt``/``base`` are natural logs of power: dB = 10 * log10(power ratio).
    diff_db = (prompt - warped) * (10.0 / np.log(10.0))
    width = round(_EQ_SMOOTH_HZ / float(LTAS_GRID_HZ[1] - LTAS_GRID_HZ[0]))
    kernel = np.hanning(width + 2)[1:-1]
    kernel /= kernel.sum()
    padded = np.pad(diff_db, width, mode="edge")
    smooth = np.convolve(padded, kernel, mode="same")[width:-width]
    gains = np.interp(EQ_BANDS_HZ, LTAS_GRID_HZ, smooth)
    gains = np.clip(gains - gains.mean(), -_EQ_LIMIT_DB, _EQ_LIMIT_DB)
    return [round(float(g), 1) for g in gains]


def _spectral_checks(x: NDArray[Any]) -> None:
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


def analyse_prompt(pcm: NDArray[Any], rate: int) -> tuple[PitchStats, NDArray[Any]]:
    """Check prompt PCM (int16 mono) and return its pitch statistics and its LTAS."""
    if pcm.ndim != 1:
        raise PromptAudioError("prompt audio must be mono")
    x = pcm.astype(np.float64) / 32768.0
    if x.size < rate // 2:
        raise PromptAudioError("prompt audio is too short to be a voice; record at least 1 second of speech")
    if not np.all(np.isfinite(x)) or float(np.sqrt(np.mean(x**2))) < 1e-4:
        raise PromptAudioError("prompt audio is silent; record a person speaking, close to the microphone")
    _spectral_checks(x)
    f0, times = _world.f0_track(x, rate, _FRAME_PERIOD_MS)
    stats = pitch_stats(f0, _FRAME_PERIOD_MS / 1000.0)
    spectrum = ltas(x, rate, f0, times) if stats is not None else None
    if stats is None or spectrum is None or stats.voiced_seconds < _MIN_VOICED_SECONDS:
        raise PromptAudioError(
            "prompt audio has too little voiced speech to measure a voice; upload clear speech of a single speaker"
        )
    median_hz = 2.0 ** (stats.median_st / 12.0)
    if not 65.0 <= median_hz <= 450.0:
        raise PromptAudioError(f"prompt pitch ({median_hz:.0f} Hz) is outside the range of human speech")
    return stats, spectrum
