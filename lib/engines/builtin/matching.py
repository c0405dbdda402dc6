"""Duration change for preset voices, and the output level of every voice.

Prompt voices are rebuilt frame by frame (:mod:`.convert`), which also applies speed.
Preset voices are espeak's own audio; when espeak's integer words-per-minute cannot hit
the requested rate closely enough, :func:`change_duration` stretches the audio with a
WORLD analysis and resynthesis at a scaled frame period (pitch and envelope kept).

Aperiodicity is not analysed there (D4C would be most of the cost): espeak's output is
synthetic, with clean pulses in voiced frames and noise in unvoiced ones, so a fixed
curve from the voicing decision loses little -- -35 dB at 0 Hz rising to -8 dB at the
Nyquist frequency in voiced frames, pure noise in unvoiced frames.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lib.engines.builtin import _world

__all__ = ["change_duration", "level_gain", "shape_level"]

_LOGGER = logging.getLogger(__name__)

_FRAME_PERIOD_MS = 5.0
_DIO_SPEED = 2
#: Shorter input than this (about 90 ms at 22.05 kHz) is passed through: WORLD needs a
#: few frames and a whole CheapTrick window, and there is nothing to hear anyway.
_MIN_SAMPLES = 2048
_NOMINAL_PEAK = 0.7
_CEILING = 0.98


def _aperiodicity(f0: NDArray[Any], bins: int) -> NDArray[Any]:
    """Fixed aperiodicity from the voicing decision (see the module docstring)."""
    rel = np.arange(bins) / (bins - 1)
    voiced = 10.0 ** ((-35.0 + 27.0 * rel * rel) / 20.0)
    return np.where((f0 > 0)[:, None], voiced[None, :], 1.0)


def change_duration(x: NDArray[Any], rate: int, factor: float) -> NDArray[Any]:
    """Stretch ``x`` by ``factor`` (>1 longer) without changing its pitch (WORLD
    analysis and resynthesis at a scaled frame period)."""
    if x.size < _MIN_SAMPLES:
        return x
    f0, times = _world.f0_track(x, rate, _FRAME_PERIOD_MS, speed=_DIO_SPEED)
    sp = _world.envelope(x, rate, f0, times)
    # Every second bin of the analysis envelope is the synthesis FFT's grid.
    step = _world.FFT_SIZE // _world.SYNTH_FFT_SIZE
    sp = np.ascontiguousarray(sp[:, ::step])
    return _world.synthesize(f0, sp, _aperiodicity(f0, sp.shape[1]), rate, _FRAME_PERIOD_MS * factor)


def level_gain(x: NDArray[Any], energy: float) -> float:
    """The gain :func:`shape_level` gives ``x``: its peak to a nominal level times
    ``energy``; 0.0 for silent or non-finite audio."""
    peak = float(np.max(np.abs(x))) if x.size else 0.0
    if peak <= 0.0 or not np.isfinite(peak):
        return 0.0
    return _NOMINAL_PEAK * energy / peak


def shape_level(x: NDArray[Any], energy: float, gain: float | None = None) -> NDArray[Any]:
    """Peak-normalise ``x`` to a nominal level times ``energy`` through a soft limiter.

    ``0.98 * tanh(g * x / 0.98)`` is linear for quiet samples, so the RMS follows
    ``energy`` (loud/soft are measurable), and it can never exceed 0.98, so loud speech
    does not clip. ``gain``: the one to apply instead (a later piece of a sentence takes
    its first piece's, :func:`level_gain`, so the level does not jump at the join).
    Returns float32."""
    if gain is None:
        gain = level_gain(x, energy)
    if gain <= 0.0 or not np.all(np.isfinite(x)):
        return np.zeros(x.size, dtype=np.float32)
    y = _CEILING * np.tanh(x * (gain / _CEILING))
    return y.astype(np.float32)
