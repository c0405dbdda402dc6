"""The frame pool of a voice: the prompt's own spectral frames, what clones are made of.

A pool holds, for every audible 5 ms frame of the prompt, its mel cepstra
(:mod:`.features`), its band aperiodicity and whether it is voiced, plus the log-F0
mean and spread of the voiced frames. :mod:`.convert` rebuilds every output frame from
the pool frames nearest to it, so the output's spectral envelopes are the prompt
speaker's own.

Storage: a pool is part of the voice profile, which ``lib.voices`` caches in memory, on
disk and in Redis, so it is packed compactly and without pickle: the profile's params
record the frame count and format, and the blob is three little-endian arrays one after
another -- cepstra as float16 (the rounding, about 0.05 % of a value, is far below what
an envelope difference can be heard at), aperiodicity bands as float16, voicing as
uint8: 93 bytes per frame, 18.6 KB per second of audible prompt, at most 0.56 MB for a
30 s prompt.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray
from typing_extensions import TypedDict

from lib.engines.builtin import _world
from lib.engines.builtin.features import AP_EDGES_HZ, N_CEPSTRA, N_GRID, band_aperiodicity, envelope_to_cepstra

__all__ = ["FRAME_PERIOD_MS", "POOL_FORMAT", "FramePool", "PoolParams", "audible", "build_pool", "level_db"]

_LOGGER = logging.getLogger(__name__)

#: Frame period (ms) of pools and of the conversion.
FRAME_PERIOD_MS = 5.0
#: Version of the blob layout; a profile with another format is rejected.
POOL_FORMAT = 1
_N_BANDS = AP_EDGES_HZ.size - 1
#: Frames quieter than this below the loud end of the recording (95th percentile of
#: frame level) are pauses and room noise, not voice: they are left out.
_AUDIBLE_DB = 50.0


def level_db(cep: NDArray[Any]) -> NDArray[Any]:
    """Mean level (dB) of each frame's log envelope from its cepstrum coefficient 0."""
    # c0 of an orthonormal DCT is sqrt(N) times the mean; the log is natural, of power.
    return np.asarray(cep[:, 0] / np.sqrt(float(N_GRID)) * (10.0 / np.log(10.0)), dtype=np.float64)


def audible(cep: NDArray[Any]) -> NDArray[Any]:
    """Frames within :data:`_AUDIBLE_DB` of the loud end of the recording."""
    level = level_db(cep)
    return np.asarray(level > float(np.percentile(level, 95.0)) - _AUDIBLE_DB)


class PoolParams(TypedDict):
    """The JSON part of a stored pool (:meth:`FramePool.params`), kept in the voice
    profile's params under ``pool``; the arrays are the profile's blob."""

    format: int
    """:data:`POOL_FORMAT` of the blob."""
    frames: int
    """Number of frames in the blob."""
    log_f0_mean: float
    log_f0_std: float


@dataclass(frozen=True)
class FramePool:
    """Audible frames of a voice and its pitch statistics."""

    cepstra: NDArray[Any]
    """Mel cepstra, frames x :data:`lib.engines.builtin.features.N_CEPSTRA`, float64."""
    ap_bands: NDArray[Any]
    """Band aperiodicity in dB, frames x 6, float64."""
    voiced: NDArray[Any]
    """Voicing of each frame, bool."""
    log_f0_mean: float
    """Mean of natural-log F0 over voiced frames."""
    log_f0_std: float
    """Standard deviation of natural-log F0 over voiced frames."""

    def params(self) -> PoolParams:
        """JSON part of the stored pool (the arrays go in :meth:`to_blob`)."""
        return {
            "format": POOL_FORMAT,
            "frames": int(self.voiced.size),
            "log_f0_mean": round(self.log_f0_mean, 6),
            "log_f0_std": round(self.log_f0_std, 6),
        }

    def to_blob(self) -> bytes:
        return (
            self.cepstra.astype("<f2").tobytes()
            + self.ap_bands.astype("<f2").tobytes()
            + self.voiced.astype(np.uint8).tobytes()
        )

    @classmethod
    def from_stored(cls, params: Mapping[str, Any], blob: bytes) -> FramePool:
        """Inverse of :meth:`params` + :meth:`to_blob`; ``ValueError`` on a mismatch."""
        if params.get("format") != POOL_FORMAT:
            raise ValueError(f"voice pool format {params.get('format')!r} is not {POOL_FORMAT}")
        n = int(params["frames"])
        sizes = (n * N_CEPSTRA * 2, n * _N_BANDS * 2, n)
        if n <= 0 or len(blob) != sum(sizes):
            raise ValueError("voice pool data has the wrong size")
        cep = np.frombuffer(blob, dtype="<f2", count=n * N_CEPSTRA).reshape(n, N_CEPSTRA)
        ap = np.frombuffer(blob, dtype="<f2", count=n * _N_BANDS, offset=sizes[0]).reshape(n, _N_BANDS)
        voiced = np.frombuffer(blob, dtype=np.uint8, count=n, offset=sizes[0] + sizes[1])
        return cls(cep.astype(np.float64), ap.astype(np.float64), voiced.astype(bool),
                   float(params["log_f0_mean"]), float(params["log_f0_std"]))  # fmt: skip

    def quantised(self) -> FramePool:
        """The pool as it reads back from storage (float16 rounding), so that a fresh
        profile and a stored one give the same audio."""
        return FramePool.from_stored(self.params(), self.to_blob())


def build_pool(x: NDArray[Any], rate: int, f0: NDArray[Any], times: NDArray[Any]) -> FramePool | None:
    """Pool of float64 audio ``x`` with its F0 track at :data:`FRAME_PERIOD_MS`;
    ``None`` when fewer than 20 voiced audible frames remain."""
    sp = _world.envelope(x, rate, f0, times)
    ap = _world.aperiodicity(x, rate, f0, times)
    cep = envelope_to_cepstra(sp, rate)
    keep = audible(cep)
    voiced = (f0 > 0) & keep
    if int(voiced.sum()) < 20:
        return None
    log_f0 = np.log(f0[voiced])
    return FramePool(
        cepstra=cep[keep],
        ap_bands=band_aperiodicity(ap, rate)[keep],
        voiced=(f0 > 0)[keep],
        log_f0_mean=float(log_f0.mean()),
        log_f0_std=float(log_f0.std()),
    ).quantised()
