"""Integrated loudness (ITU-R BS.1770-4, mono) and the gain that brings audio to a target.

Why: phrases played one after another (a queue call, then a notice) must sound equally
loud, whatever engine, voice or style made them. Peak normalisation does not do that
(a shouted word and a calm sentence with the same peak differ by several dB); loudness
in LUFS, as broadcasters measure it, does.

The measurement, as the recommendation defines it: K-weighting (a high shelf of about
+4 dB above 1.5 kHz for the head, then a high-pass at 38 Hz), mean square in blocks of
400 ms overlapping by 75 %, an absolute gate at -70 LUFS, a relative gate 10 LU below
the loudness of the blocks that passed the first gate. The filter coefficients are
computed for any sample rate from the analogue parameters the recommendation's 48 kHz
coefficients were derived from, so 22,050 Hz (builtin) and 24,000 Hz (CosyVoice) are
measured as the standard intends (at 48 kHz they reproduce the published coefficients).

One extension: a clip shorter than one block (a spelled character of a template, say)
is measured as one block of its own length, where the recommendation has no answer.

numpy and scipy only (already dependencies): about 1 ms for 5 s at 22,050 Hz.
"""

from __future__ import annotations

import logging
import math
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.ndimage import minimum_filter1d, uniform_filter1d
from scipy.signal import sosfilt

__all__ = ["MAX_GAIN_DB", "PEAK_CEILING_DB", "gain_db", "integrated_loudness", "k_weighting", "limit", "normalise"]

_LOGGER = logging.getLogger(__name__)

_HOP_S = 0.1  # blocks of four hops: 400 ms, 75 % overlap
_ABSOLUTE_GATE = -70.0
_RELATIVE_GATE = -10.0
_OFFSET = -0.691  # makes a 997 Hz sine at full scale read -3.01 LUFS in one channel

#: A gain never lifts audio by more than this: quiet engine output is brought up, but
#: a near-silent clip is not turned into loud noise.
MAX_GAIN_DB = 20.0
#: After normalisation no sample exceeds this level (dBFS): peaks the gain would push
#: above it are limited (:func:`limit`), so normalisation never clips. Speech from the
#: builtin engine has peaks about 16 dB above its loudness (median over the shipped
#: phrases), right at what -16 LUFS under -1 dBFS allows: without the limiter, half of
#: them would stay up to 2 dB below the target.
PEAK_CEILING_DB = -1.0
_LIMIT_S = 0.005  # the limiter's look-ahead and release


@lru_cache(maxsize=16)
def k_weighting(rate: int) -> tuple[tuple[NDArray[Any], NDArray[Any]], tuple[NDArray[Any], NDArray[Any]]]:
    """``((b1, a1), (b2, a2))``: the shelf and the high-pass of the K-weighting at ``rate``."""
    # Stage 1, the shelving filter: analogue centre frequency, gain and Q behind the
    # recommendation's 48 kHz coefficients, through the bilinear transform.
    f0, gain, q = 1681.974450955533, 3.999843853973347, 0.7071752369554196
    k = math.tan(math.pi * f0 / rate)
    vh = 10.0 ** (gain / 20.0)
    vb = vh**0.4996667741545416
    a0 = 1.0 + k / q + k * k
    b1 = np.array([(vh + vb * k / q + k * k) / a0, 2.0 * (k * k - vh) / a0, (vh - vb * k / q + k * k) / a0])
    a1 = np.array([1.0, 2.0 * (k * k - 1.0) / a0, (1.0 - k / q + k * k) / a0])
    # Stage 2, the high-pass (RLB weighting).
    f0, q = 38.13547087602444, 0.5003270373238773
    k = math.tan(math.pi * f0 / rate)
    a0 = 1.0 + k / q + k * k
    b2 = np.array([1.0, -2.0, 1.0])
    a2 = np.array([1.0, 2.0 * (k * k - 1.0) / a0, (1.0 - k / q + k * k) / a0])
    return (b1, a1), (b2, a2)


@lru_cache(maxsize=16)
def _sos(rate: int) -> NDArray[Any]:
    (b1, a1), (b2, a2) = k_weighting(rate)
    return np.array([np.concatenate([b1, a1]), np.concatenate([b2, a2])])


def integrated_loudness(audio: NDArray[Any], rate: int) -> float:
    """Loudness of mono float audio (full scale 1.0) in LUFS; ``-inf`` for silence."""
    x = np.asarray(audio, dtype=np.float64).reshape(-1)
    if x.size == 0:
        return -math.inf
    y = sosfilt(_sos(int(rate)), x)
    hop = max(round(_HOP_S * rate), 1)
    block = 4 * hop  # 400 ms blocks overlapping by 75 %: four 100 ms hops each
    if x.size < block:
        z = np.array([float(np.dot(y, y)) / x.size])
    else:
        # Sums over hops, then over four consecutive hops: the same blocks as a sliding
        # window, at a fraction of the cost of a cumulative sum.
        hops = (y[: x.size // hop * hop] ** 2).reshape(-1, hop).sum(axis=1)
        z = (hops[:-3] + hops[1:-2] + hops[2:-1] + hops[3:]) / block
    with np.errstate(divide="ignore"):
        levels = _OFFSET + 10.0 * np.log10(z)
    kept = z[levels > _ABSOLUTE_GATE]
    if kept.size == 0:
        return -math.inf
    relative = _OFFSET + 10.0 * math.log10(float(kept.mean())) + _RELATIVE_GATE
    with np.errstate(divide="ignore"):
        kept = kept[_OFFSET + 10.0 * np.log10(kept) > relative]
    return _OFFSET + 10.0 * math.log10(float(kept.mean()))


def gain_db(audio: NDArray[Any], rate: int, target: float, loudness: float | None = None) -> float:
    """The gain in dB that brings ``audio`` to ``target`` LUFS, at most
    :data:`MAX_GAIN_DB`; 0 for silence. ``loudness``: already measured."""
    if loudness is None:
        loudness = integrated_loudness(audio, rate)
    if not math.isfinite(loudness):
        return 0.0
    return min(target - loudness, MAX_GAIN_DB)


def limit(audio: NDArray[Any], rate: int, ceiling_db: float = PEAK_CEILING_DB) -> NDArray[Any]:
    """``audio`` with every peak above ``ceiling_db`` brought down to it by a smooth
    gain (5 ms look-ahead and release around each peak); unchanged when none is."""
    ceiling = 10.0 ** (ceiling_db / 20.0)
    magnitude = np.abs(audio)
    if magnitude.size == 0 or float(magnitude.max()) <= ceiling:
        return audio
    width = max(int(_LIMIT_S * rate), 1)
    out: NDArray[Any] = np.array(audio, copy=True)
    # Only around the samples over the ceiling: the gain is 1 everywhere else.
    over = np.flatnonzero(magnitude > ceiling)
    breaks = np.flatnonzero(np.diff(over) > 4 * width)
    for first, last in zip(over[np.r_[0, breaks + 1]], over[np.r_[breaks, over.size - 1]], strict=True):
        lo, hi = max(int(first) - 2 * width, 0), min(int(last) + 2 * width + 1, audio.size)
        need = np.minimum(1.0, ceiling / np.maximum(magnitude[lo:hi], 1e-12))
        # The minimum over +-width, averaged over a window of width: never above what any
        # sample needs (each average is over values that are all <= that sample's need).
        gain = uniform_filter1d(minimum_filter1d(need, size=2 * width + 1, mode="nearest"), size=width, mode="nearest")
        out[lo:hi] = audio[lo:hi] * np.minimum(gain, need)
    return out


def normalise(audio: NDArray[Any], rate: int, target: float, loudness: float | None = None) -> NDArray[Any]:
    """``audio`` brought to ``target`` LUFS, its peaks limited to :data:`PEAK_CEILING_DB`
    (``loudness``: its loudness, when already measured)."""
    gain = np.float32(10.0 ** (gain_db(audio, rate, target, loudness) / 20.0))
    return limit(audio * gain, rate)
