"""Transform espeak output toward a voice profile with WORLD, and shape the output level.

Method, per sentence (:func:`match_voice`):

1. Analyse the espeak audio with WORLD: F0 by DIO (on a 2x decimated signal) refined by
   StoneMask, and the CheapTrick spectral envelope, at 5 ms frames (measured: 10 ms
   frames smear espeak's fast transitions; male prompt similarity 0.666 at 10 ms,
   0.692 at 5 ms, for 30 % more CPU).
2. Map F0 in the log domain: ``st' = m_t + (st - m_s) * k``, where ``m_s`` is the
   sentence's median, ``m_t`` the prompt's (plus style and seed offsets) and ``k`` the
   ratio of the prompt's 10-90 % span to the sentence's (times the style's range factor).
3. Warp the envelope along frequency by the profile's vocal-tract scale ``r``
   (``E'(f) = E(f / r)``, interpolated in log power), then apply the profile's
   equaliser (prompt LTAS over warped base LTAS, see :mod:`.profile`).
4. Resynthesise with WORLD at ``5 ms x duration_factor`` per frame, which also applies
   the rate residual without a separate time-stretch.

Aperiodicity is not analysed (D4C would be 60-70 % of the cost): espeak's output is
synthetic, with clean pulses in voiced frames and noise in unvoiced ones, so a fixed
curve from the voicing decision loses little -- -35 dB at 0 Hz rising to -8 dB at the
Nyquist frequency in voiced frames, pure noise in unvoiced frames.

Why WORLD and not Praat PSOLA (the previous version, builtin-1), measured with
``bench/bench_voice.py`` (resemblyzer cosine to the prompt, median of 3 Mandarin
sentences) on this 2-core machine:

=================  ====================  =====================  =======================
                   Praat PSOLA           WORLD (this)           notes
=================  ====================  =====================  =======================
female prompt      raw 0.583 -> 0.596    raw 0.584 -> 0.779     base f2 (raw cmn 0.611)
male prompt        raw 0.655 -> 0.643    raw 0.666 -> 0.685     base m1 (raw cmn 0.655)
RTF                about 0.02            0.024 wall, 0.020 CPU  4-5 s sentences
10 s extraction    under 300 ms          64-77 ms               DIO+StoneMask+CheapTrick
determinism        no (Praat's pitch     yes                    see :mod:`._world`
                   tracker varied)
=================  ====================  =====================  =======================

(WORLD: medians over 3 sentences x 5 seeds, on the shared 2-core machine under load.
Full WORLD analysis with D4C aperiodicity at 5 ms frames cost about 0.1 RTF in the
previous study, 260 ms of 395 ms for a 4 s sentence, hence the fixed aperiodicity;
two different fixed curves scored within 0.001 of each other.)

The gain comes from what PSOLA cannot do: an independent spectral-envelope warp and a
long-term spectral equaliser. Prototype on the female prompt (base f2, raw 0.585,
first bench text's own LTAS as reference): F0 mapping alone 0.579, plus envelope warp
by 1.25 0.717, plus equaliser 0.812. ``bench/bench_voice.py`` prints current figures.

Determinism: WORLD reseeds its own random generator in every call, all calls are
serialised by one lock (:mod:`._world`), and everything else is float64 numpy without
BLAS, so identical input gives identical bytes in any process.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lib.engines.builtin import _world
from lib.engines.builtin.profile import EQ_BANDS_HZ, pitch_stats

__all__ = ["VoiceTarget", "change_duration", "match_voice", "shape_level"]

_LOGGER = logging.getLogger(__name__)

_FRAME_PERIOD_MS = 5.0
_DIO_SPEED = 2
_MIN_RANGE_FACTOR, _MAX_RANGE_FACTOR = 0.3, 3.0
_MIN_F0, _MAX_F0 = 50.0, 600.0
#: Shorter input than this (about 90 ms at 22.05 kHz) is passed through: WORLD needs a
#: few frames and a whole CheapTrick window, and there is nothing to hear anyway.
_MIN_SAMPLES = 2048
_NOMINAL_PEAK = 0.7
_CEILING = 0.98


@dataclass(frozen=True)
class VoiceTarget:
    """Where :func:`match_voice` takes a sentence."""

    median_st: float
    """Target median F0 in semitones re 1 Hz."""
    range_st: float | None
    """Target 10-90 % F0 span in semitones; ``None`` keeps the source's span."""
    range_factor: float = 1.0
    """Extra factor on the span (style)."""
    formant_scale: float = 1.0
    """Spectral-envelope frequency scale (>1 shorter vocal tract)."""
    eq_db: Sequence[float] = ()
    """Equaliser gains at :data:`lib.engines.builtin.profile.EQ_BANDS_HZ`; empty for none."""


def _aperiodicity(f0: NDArray[Any], bins: int, rate: int) -> NDArray[Any]:
    """Fixed aperiodicity from the voicing decision (see the module docstring)."""
    rel = np.arange(bins) / (bins - 1)
    voiced = 10.0 ** ((-35.0 + 27.0 * rel * rel) / 20.0)
    return np.where((f0 > 0)[:, None], voiced[None, :], 1.0)


def _warp(log_sp: NDArray[Any], scale: float) -> NDArray[Any]:
    """``E'(f) = E(f / scale)`` per frame, linear interpolation between bins."""
    bins = log_sp.shape[1]
    src = np.arange(bins) / scale
    lo = np.clip(np.floor(src).astype(np.int64), 0, bins - 2)
    frac = np.clip(src - lo, 0.0, 1.0)
    return log_sp[:, lo] * (1.0 - frac) + log_sp[:, lo + 1] * frac


def _resynthesise(x: NDArray[Any], rate: int, target: VoiceTarget | None, duration_factor: float) -> NDArray[Any]:
    f0, times = _world.f0_track(x, rate, _FRAME_PERIOD_MS, speed=_DIO_SPEED)
    sp = _world.envelope(x, rate, f0, times)
    # Every second bin of the analysis envelope is the synthesis FFT's grid.
    step = _world.FFT_SIZE // _world.SYNTH_FFT_SIZE
    log_sp = np.log(np.maximum(sp[:, ::step], 1e-300))
    new_f0 = f0
    if target is not None:
        stats = pitch_stats(f0, _FRAME_PERIOD_MS / 1000.0)
        if stats is not None:
            source_span = max(stats.range_st, 0.5)
            span = target.range_st if target.range_st is not None else source_span
            k = float(np.clip(span / source_span * target.range_factor, _MIN_RANGE_FACTOR, _MAX_RANGE_FACTOR))
            voiced = f0 > 0
            st = 12.0 * np.log2(np.where(voiced, f0, 1.0))
            mapped = 2.0 ** ((target.median_st + (st - stats.median_st) * k) / 12.0)
            new_f0 = np.where(voiced, np.clip(mapped, _MIN_F0, _MAX_F0), 0.0)
        if target.formant_scale != 1.0:
            log_sp = _warp(log_sp, target.formant_scale)
        if len(target.eq_db):
            freqs = np.arange(log_sp.shape[1]) * (rate / _world.SYNTH_FFT_SIZE)
            gain_db = np.interp(freqs, EQ_BANDS_HZ, np.asarray(target.eq_db, dtype=np.float64))
            log_sp = log_sp + gain_db[None, :] * (np.log(10.0) / 10.0)
    ap = _aperiodicity(new_f0, log_sp.shape[1], rate)
    return _world.synthesize(new_f0, np.exp(log_sp), ap, rate, _FRAME_PERIOD_MS * duration_factor)


def match_voice(x: NDArray[Any], rate: int, target: VoiceTarget, *, duration_factor: float = 1.0) -> NDArray[Any]:
    """Return ``x`` (float64) with its F0 mapped to ``target``, its envelope warped and
    equalised, and its duration scaled by ``duration_factor``."""
    if x.size < _MIN_SAMPLES:
        return x
    return _resynthesise(x, rate, target, duration_factor)


def change_duration(x: NDArray[Any], rate: int, factor: float) -> NDArray[Any]:
    """Stretch ``x`` by ``factor`` (>1 longer) without changing its pitch (WORLD
    analysis and resynthesis at a scaled frame period)."""
    if x.size < _MIN_SAMPLES:
        return x
    return _resynthesise(x, rate, None, factor)


def shape_level(x: NDArray[Any], energy: float) -> NDArray[Any]:
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
