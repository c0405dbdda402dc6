"""Frame-level voice transfer: rebuild speech from the nearest frames of a voice's pool.

Used for cloning (the source is espeak-ng's reading of the text) and for the convert
mode (the source is a recording). Per call:

1. WORLD analysis of the source at 5 ms frames: F0 by DIO + StoneMask, CheapTrick
   envelope, turned into mel cepstra (:mod:`.features`).
2. For every audible source frame, the :data:`K` nearest pool frames of the same voicing
   (voiced to voiced, unvoiced to unvoiced), by Euclidean distance over cepstra 1-39
   after removing, on each side, the mean of that voicing class over the utterance.
   The mean removal takes out what the recording and the vocal tract add to every frame
   (microphone, tilt, average formant positions), so that frames are matched by what is
   said; the output then takes the pool frames as they are, with the voice's own
   colour. The new frame's cepstra 1-39 are ``matched`` times the neighbours' mean plus
   ``1 - matched`` times the source's own frame moved by the difference of the two class
   means (the voice's average envelope in place of the source's, the source's vowels
   kept): 1 for espeak's base and recordings, 0 for Kokoro's, whose vowels the
   neighbours' averages blurred (issue 33, docs/builtin-engine.md). Aperiodicity is the
   neighbours' mean; cepstrum 0 (the level) stays the source's, so loudness and pauses
   follow the source.
3. Log-F0 mapped to the voice's mean and spread (the source's contour shape is kept),
   plus the style's and seed's offsets.
4. The envelope above the cepstral grid's top (7.8 kHz; espeak runs at 22.05 kHz, a
   prompt only reaches 8 kHz) is the source's, shifted to join the new envelope.
5. WORLD synthesis at ``5 ms x duration_factor`` per frame (which applies speed).

What was measured with a prototype of this module (resemblyzer similarity to the prompt
as in bench/bench_voice.py, the 5 tuning voices only, its 3 Mandarin + 6 English
sentences, seed 0; pocketsphinx word error rate of the English ones; raw espeak 0.558
and WER 0.59):

====================================================  ==========  ==============  =====
variant                                               similarity  identification  WER
====================================================  ==========  ==============  =====
this: k=4, class means removed, match c1-c39          0.684       3/5             0.65
match c1-c12 only                                     0.690       3/5             0.70
warp the source's frequency axis x1.2 before matching 0.712       4/5             0.81
 (x1.3 with c1-c12)                                   0.714       5/5             0.83
per-dimension variance also matched (beta 1)          0.675       3/5             0.74
k=1 / mean of k=4 (c1-c12)                            0.694/0.690 4/5 / 3/5       0.76/0.70
continuity (Viterbi over 8 candidates, jump cost 5)   0.690       3/5             0.74
+-2-frame context in the match (deltas)               0.701       3/5             0.76
====================================================  ==========  ==============  =====

On 6 of the sentences (3 + 3), against 0.691 for this variant: k=2 0.697, k=3 0.694,
k=6 0.688; fixed aperiodicity instead of the neighbours' 0.694; 3-frame smoothing of the
output cepstra 0.686; a pool analysed with Harvest instead of DIO 0.693 (Harvest costs
about 1.6 s per 10 s of prompt, DIO + StoneMask 0.1 s, so DIO is kept).

The warps and context gain similarity but lose intelligibility beyond the target
(at most 0.10 above raw espeak's WER); this variant keeps the best similarity within it.
The whole synthesis costs about 0.023 s of CPU per second of output.

Determinism: the neighbour search is ``scipy.spatial.cKDTree`` (exact; ties broken by
index), everything else float64 numpy and WORLD under its lock, no BLAS.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.spatial import cKDTree

from lib.engines.builtin import _world
from lib.engines.builtin.features import (
    GRID_HZ,
    bands_to_aperiodicity,
    cepstra_to_grid,
    envelope_to_cepstra,
    grid_to_bins,
    log_envelope_on_grid,
)
from lib.engines.builtin.pool import FRAME_PERIOD_MS, FramePool, audible

__all__ = ["MIN_ANCHOR_FRAMES", "Anchor", "K", "Prosody", "transfer", "transfer_piece"]

_LOGGER = logging.getLogger(__name__)

#: Neighbours per frame (measured: 2, 3, 4, 6 within 0.01 of each other; 4 kept the
#: lowest word error rate).
K = 4
_MIN_RANGE_FACTOR, _MAX_RANGE_FACTOR = 0.3, 3.0
_MIN_F0, _MAX_F0 = 50.0, 700.0
#: Shorter input than this is passed through (WORLD needs a few frames).
_MIN_SAMPLES = 2048
_EDGE_POINTS = 4


@dataclass(frozen=True)
class Prosody:
    """Changes on top of the voice's own pitch statistics."""

    pitch_st: float = 0.0
    """Semitones added to the voice's mean pitch (style, seed)."""
    range_factor: float = 1.0
    """Factor on the voice's pitch spread (style)."""
    duration_factor: float = 1.0
    """Output duration over input duration (>1 slower)."""


@dataclass(frozen=True)
class Anchor:
    """A source's statistics that the transfer normalises by: its log-F0 mean and spread
    and, per voicing class, its mean cepstrum (c1-c39). A sentence made in pieces
    (lib.engines.builtin.kokoro.phonemes) is transferred with its first piece's, so that
    pitch register and colour do not jump at the joins."""

    log_f0_mean: float | None
    log_f0_std: float | None
    class_means: tuple[tuple[bool, tuple[float, ...]], ...]

    def mean_of(self, cls: bool) -> NDArray[Any] | None:
        for key, values in self.class_means:
            if key == cls:
                return np.asarray(values, dtype=np.float64)
        return None


#: Voiced frames a piece needs for its statistics to be a sentence's anchor (0.2 s).
MIN_ANCHOR_FRAMES = 40


def _class_mean(cep: NDArray[Any], sel: NDArray[Any]) -> NDArray[Any]:
    """Mean of cepstra 1-39 over the selected frames (one voicing class of one side)."""
    return np.asarray(cep[sel, 1:].mean(axis=0))


def _match(
    query: NDArray[Any], query_mean: NDArray[Any], pool: FramePool, pool_sel: NDArray[Any], pool_mean: NDArray[Any]
) -> NDArray[Any]:
    """Indices (into the pool) of the :data:`K` nearest pool frames of each query frame
    (cepstra 1-39), each side's class mean removed."""
    tree = cKDTree(pool.cepstra[pool_sel, 1:] - pool_mean)
    _, idx = tree.query(query - query_mean, k=K)
    return np.asarray(np.flatnonzero(pool_sel)[np.asarray(idx).reshape(query.shape[0], K)])


def _envelope(
    query: NDArray[Any], query_mean: NDArray[Any], matched: NDArray[Any], pool_mean: NDArray[Any], weight: float
) -> NDArray[Any]:
    """New cepstra 1-39 of one voicing class: ``weight`` of the neighbours' mean
    (``matched``) plus ``1 - weight`` of the source's own frames moved by the difference of
    the class means (the voice's average vocal tract and recording, the source's phonetic
    detail). 1 is the frame matching alone; 0 keeps every vowel of the source."""
    if weight >= 1.0:
        return matched
    shifted = query + (pool_mean - query_mean)
    return np.asarray(weight * matched + (1.0 - weight) * shifted)


def _map_f0(f0: NDArray[Any], pool: FramePool, prosody: Prosody, anchor: Anchor | None = None) -> NDArray[Any]:
    voiced = f0 > 0
    if int(voiced.sum()) < 5:
        return f0
    log_f0 = np.log(f0[voiced])
    mean = anchor.log_f0_mean if anchor is not None and anchor.log_f0_mean is not None else float(log_f0.mean())
    std = anchor.log_f0_std if anchor is not None and anchor.log_f0_std is not None else float(log_f0.std())
    spread = max(std, 1e-3)
    k = float(np.clip(pool.log_f0_std / spread * prosody.range_factor, _MIN_RANGE_FACTOR, _MAX_RANGE_FACTOR))
    centre = pool.log_f0_mean + prosody.pitch_st * math.log(2.0) / 12.0
    mapped = np.exp(centre + (log_f0 - mean) * k)
    out = np.zeros_like(f0)
    out[voiced] = np.clip(mapped, _MIN_F0, _MAX_F0)
    return out


def _anchor(f0: NDArray[Any], cep: NDArray[Any], active: NDArray[Any]) -> Anchor | None:
    """The source's statistics, or None when it has too few voiced frames to stand for a
    sentence (:data:`MIN_ANCHOR_FRAMES`)."""
    voiced = f0 > 0
    if int((voiced & active).sum()) < MIN_ANCHOR_FRAMES:
        return None
    log_f0 = np.log(f0[voiced])
    means = tuple(
        (cls, tuple(float(v) for v in cep[(voiced == cls) & active, 1:].mean(axis=0)))
        for cls in (True, False) if ((voiced == cls) & active).any()
    )  # fmt: skip
    return Anchor(float(log_f0.mean()), float(log_f0.std()), means)


def transfer(
    x: NDArray[Any], rate: int, pool: FramePool, prosody: Prosody, *, dio_speed: int = 2, unvoiced: bool = True,
    matched: float = 1.0,
) -> NDArray[Any]:  # fmt: skip
    """``x`` (float64 at ``rate``) re-spoken with ``pool``'s spectral frames and pitch.

    ``dio_speed`` 2 analyses pitch on a decimated signal: enough for espeak's clean
    pulses; recordings use 1. ``unvoiced`` False keeps the source's own unvoiced frames
    (its consonants) and matches the voiced ones only. ``matched``: weight of the
    neighbours' envelope against the source's own shifted to the voice's class mean
    (:func:`_envelope`); aperiodicity comes from the neighbours either way."""
    return transfer_piece(x, rate, pool, prosody, dio_speed=dio_speed, unvoiced=unvoiced, matched=matched)[0]


def transfer_piece(
    x: NDArray[Any], rate: int, pool: FramePool, prosody: Prosody, *, dio_speed: int = 2, unvoiced: bool = True,
    matched: float = 1.0, anchor: Anchor | None = None,
) -> tuple[NDArray[Any], Anchor | None]:  # fmt: skip
    """:func:`transfer` of one piece of a sentence, normalised by ``anchor`` (the
    sentence's first piece's statistics: its class means and log-F0) when given, else by
    its own; and the anchor for the sentence's later pieces (``anchor``, or this piece's
    own when it has enough voiced frames, else None)."""
    if x.size < _MIN_SAMPLES:
        return x, anchor
    f0, times = _world.f0_track(x, rate, FRAME_PERIOD_MS, speed=dio_speed)
    sp = _world.envelope(x, rate, f0, times)
    log_sp = np.log(np.maximum(sp, 1e-300))
    cep = envelope_to_cepstra(sp, rate)
    active = audible(cep)
    voiced = f0 > 0
    if anchor is None:
        anchor = _anchor(f0, cep, active)
    out = cep.copy()
    bands = np.zeros((cep.shape[0], pool.ap_bands.shape[1]), dtype=np.float64)
    for cls in (True, False) if unvoiced else (True,):
        sel = (voiced == cls) & active
        pool_sel = pool.voiced == cls
        if not sel.any() or int(pool_sel.sum()) < K:
            continue
        query, pool_mean = cep[sel, 1:], _class_mean(pool.cepstra, pool_sel)
        fixed = anchor.mean_of(cls) if anchor is not None else None
        query_mean = fixed if fixed is not None else _class_mean(cep, sel)
        idx = _match(query, query_mean, pool, pool_sel, pool_mean)
        out[sel, 1:] = _envelope(query, query_mean, pool.cepstra[idx][:, :, 1:].mean(axis=1), pool_mean, matched)
        bands[sel] = pool.ap_bands[idx].mean(axis=1)
    new_f0 = _map_f0(f0, pool, prosody, anchor)
    # Synthesis envelope: every second bin of the analysis envelope is its grid.
    step = _world.FFT_SIZE // _world.SYNTH_FFT_SIZE
    bins = _world.SYNTH_FFT_SIZE // 2 + 1
    grid = cepstra_to_grid(out)
    new_log = grid_to_bins(grid, bins, rate)
    freqs = np.arange(bins) * (rate / _world.SYNTH_FFT_SIZE)
    top = freqs > GRID_HZ[-1]
    if top.any():
        source_grid = log_envelope_on_grid(log_sp, rate)
        offset = (grid[:, -_EDGE_POINTS:] - source_grid[:, -_EDGE_POINTS:]).mean(axis=1)
        new_log[:, top] = log_sp[:, ::step][:, top] + offset[:, None]
    ap = bands_to_aperiodicity(bands, bins, rate)
    ap[new_f0 <= 0] = 1.0
    y = _world.synthesize(new_f0, np.exp(new_log), ap, rate, FRAME_PERIOD_MS * prosody.duration_factor)
    return y, anchor
