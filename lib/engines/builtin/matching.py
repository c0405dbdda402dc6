"""Transform espeak output toward a voice profile, and shape the output level.

Method: Praat pitch-synchronous overlap-add (PSOLA) through ``parselmouth``.

1. Measure the pitch of the espeak audio (voiced frames, semitones).
2. Map every voiced frame linearly in semitones so that the median lands on the target
   median and the 10-90 % span on the target span: ``st' = m_t + (st - m_s) * k``.
3. Shift formants by the vocal-tract scale ``r`` by resampling (all frequencies x r,
   duration / r); the PSOLA step then restores the duration (x r, times any rate
   residual) and imposes the mapped pitch, so only the spectral envelope stays scaled.

Why Praat PSOLA and not WORLD (both measured, see bench/bench_voice.py): on a 4.1 s
espeak sentence WORLD costs dio 9 ms + cheaptrick 65 ms + d4c 260 ms + synthesis 61 ms
(RTF about 0.10, twice the 0.05 budget), against about 80 ms for Praat's whole Change
gender (RTF about 0.02) and less for this pipeline. espeak is a formant synthesiser
with clean glottal pulses, the best case for PSOLA, while WORLD's vocoder adds its own
buzz to it. Speaker similarity (resemblyzer) is reported by the bench for both.
pyworld also needs a source build and a setuptools < 81 pin; parselmouth ships wheels.

Determinism: Praat's overlap-add draws from Praat's global random generator (it
jitters the copying of voiceless stretches), so identical input gave different bytes on
every call. Each transform therefore seeds that generator with a fixed value first
(``random_initializeWithSeedUnsafelyButPredictably``) and re-seeds it unpredictably
afterwards, so other Praat users in the process are not left with a fixed sequence. The
rest is single-threaded float64 arithmetic; callers serialise calls (Praat's state is
global).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from fractions import Fraction

import numpy as np
import parselmouth
from parselmouth.praat import call, run
from scipy.signal import resample_poly

from lib.engines.builtin.profile import pitch_frames, pitch_stats

__all__ = ["change_duration", "match_pitch_and_formants", "shape_level"]

_LOGGER = logging.getLogger(__name__)

_MIN_RANGE_FACTOR, _MAX_RANGE_FACTOR = 0.3, 3.0
_NOMINAL_PEAK = 0.7
_CEILING = 0.98
_PRAAT_SEED = 20240611


@contextmanager
def _predictable_praat() -> Iterator[None]:
    """Seed Praat's global random generator for the duration of one transform."""
    run(f"random_initializeWithSeedUnsafelyButPredictably({_PRAAT_SEED})")
    try:
        yield
    finally:
        run("random_initializeSafelyAndUnpredictably()")


def match_pitch_and_formants(
    x: np.ndarray,
    rate: int,
    *,
    target_median_st: float,
    target_range_st: float | None,
    range_factor: float,
    formant_ratio: float,
    duration_factor: float,
) -> np.ndarray:
    """Return ``x`` (float64) with its pitch mapped to the target statistics, its
    formants scaled by ``formant_ratio`` and its duration scaled by ``duration_factor``.

    ``target_range_st`` None keeps the source's own span (times ``range_factor``)."""
    times, hz = pitch_frames(x, rate)
    stats = pitch_stats(hz)
    if stats is None:
        # Nothing voiced to map (a lone consonant): only the duration changes.
        return change_duration(x, rate, duration_factor) if duration_factor != 1.0 else x
    source_span = max(stats.range_st, 0.5)
    k = (target_range_st if target_range_st is not None else source_span) / source_span * range_factor
    k = float(np.clip(k, _MIN_RANGE_FACTOR, _MAX_RANGE_FACTOR))
    new_hz = 2.0 ** ((target_median_st + (12.0 * np.log2(hz) - stats.median_st) * k) / 12.0)
    new_hz = np.clip(new_hz, 50.0, 600.0)

    ratio = Fraction(formant_ratio).limit_denominator(40)
    if ratio != 1:
        # Resample to 1/r as many samples and keep the rate: every frequency x r.
        y = resample_poly(x, ratio.denominator, ratio.numerator)
        scale = float(ratio)
    else:
        y, scale = x, 1.0
    with _predictable_praat():
        return _psola(y, rate, times / scale, new_hz, scale * duration_factor, 600.0 * max(scale, 1.0))


def _psola(
    y: np.ndarray, rate: int, times: np.ndarray, hz: np.ndarray, duration_factor: float, ceiling: float
) -> np.ndarray:
    """Impose pitch points (``times``, ``hz``) and a constant duration factor on ``y``."""
    sound = parselmouth.Sound(np.ascontiguousarray(y, dtype=np.float64), float(rate))
    manipulation = call(sound, "To Manipulation", 0.01, 50.0, ceiling)
    tier = call("Create PitchTier", "target", 0.0, sound.duration)
    for t, f in zip(times, hz, strict=True):
        call(tier, "Add point", float(t), float(f))
    call([manipulation, tier], "Replace pitch tier")
    durations = call("Create DurationTier", "target", 0.0, sound.duration)
    call(durations, "Add point", 0.0, duration_factor)
    call([manipulation, durations], "Replace duration tier")
    out = call(manipulation, "Get resynthesis (overlap-add)")
    return np.asarray(out.values[0], dtype=np.float64)


def change_duration(x: np.ndarray, rate: int, factor: float) -> np.ndarray:
    """Stretch ``x`` by ``factor`` (>1 longer) without changing its pitch."""
    sound = parselmouth.Sound(np.ascontiguousarray(x, dtype=np.float64), float(rate))
    with _predictable_praat():
        out = call(sound, "Lengthen (overlap-add)", 50.0, 600.0, float(factor))
    return np.asarray(out.values[0], dtype=np.float64)


def shape_level(x: np.ndarray, energy: float) -> np.ndarray:
    """Peak-normalise ``x`` to a nominal level times ``energy`` through a soft limiter.

    ``0.98 * tanh(g * x / 0.98)`` is linear for quiet samples, so the RMS follows
    ``energy`` (loud/soft are measurable), and it can never exceed 0.98, so loud speech
    does not clip. Returns float32."""
    peak = float(np.max(np.abs(x))) if x.size else 0.0
    if peak <= 0.0 or not np.isfinite(peak):
        return np.zeros(x.size, dtype=np.float32)
    gain = _NOMINAL_PEAK * energy / peak
    y = _CEILING * np.tanh(x * (gain / _CEILING))
    return y.astype(np.float32)
