"""Deterministic access to the WORLD vocoder (``pyworld``) for the builtin engine.

Why a wrapper:

- ``pyworld`` comes from the ``pyworld-prebuilt`` wheel (0.3.6.post1: a cp311 manylinux
  wheel that, unlike the sdist of ``pyworld`` 0.3.5, needs no compiler and does not
  import ``pkg_resources``, so a newer setuptools cannot break it). The import is done
  once here, and a missing or broken install becomes
  :class:`lib.errors.EngineUnavailableError`.
- WORLD keeps one global random generator (``randn``) for the safeguard noise of
  CheapTrick/D4C and the aperiodic excitation of the synthesis. Every WORLD entry point
  reseeds it first (checked: repeated and interleaved calls on different inputs give
  identical bytes, in one process and across processes), so results are a function of
  the arguments alone -- as long as two threads never run WORLD at the same time. Every
  call therefore holds :data:`_LOCK`, shared by all engine instances in the process.
- WORLD is single-threaded C on float64; nothing here uses BLAS, so the number of
  numpy/BLAS threads cannot change a result.
"""

from __future__ import annotations

import logging
import threading
import warnings
from types import ModuleType
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lib.errors import EngineUnavailableError

__all__ = ["FFT_SIZE", "SYNTH_FFT_SIZE", "aperiodicity", "envelope", "f0_track", "synthesize", "version"]

_LOGGER = logging.getLogger(__name__)

#: CheapTrick FFT size: long enough for a 60 Hz pitch floor at 22.05 kHz (3 periods).
FFT_SIZE = 1024
#: FFT size of the resynthesis. The envelope is smooth, so every second bin of the
#: 1024-point envelope carries it; the 512-point synthesis halves WORLD's per-pulse cost.
SYNTH_FFT_SIZE = 512

_F0_FLOOR, _F0_CEIL = 60.0, 600.0
_LOCK = threading.Lock()
_MODULE: ModuleType | None = None


def _pyworld() -> ModuleType:
    global _MODULE
    if _MODULE is None:
        try:
            with warnings.catch_warnings():
                # Older pyworld builds import pkg_resources, which warns that it is deprecated.
                warnings.simplefilter("ignore")
                import pyworld
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EngineUnavailableError(
                "the builtin engine needs the WORLD vocoder: pip install pyworld-prebuilt==0.3.6.post1"
            ) from exc
        _MODULE = pyworld
    return _MODULE


def version() -> str:
    """pyworld's version, for the engine's model version."""
    return str(getattr(_pyworld(), "__version__", "unknown"))


def _c64(a: NDArray[Any]) -> NDArray[Any]:
    return np.ascontiguousarray(a, dtype=np.float64)


def f0_track(x: NDArray[Any], rate: int, frame_period: float, speed: int = 1) -> tuple[NDArray[Any], NDArray[Any]]:
    """F0 (Hz, 0 for unvoiced) and frame times (s) by DIO refined with StoneMask.

    ``speed`` > 1 lets DIO analyse a decimated signal: cheaper, and enough for the clean
    pulses of espeak output."""
    pw = _pyworld()
    x = _c64(x)
    with _LOCK:
        f0, times = pw.dio(x, rate, f0_floor=_F0_FLOOR, f0_ceil=_F0_CEIL, frame_period=frame_period, speed=speed)
        f0 = pw.stonemask(x, f0, times, rate)
    return np.asarray(f0, dtype=np.float64), np.asarray(times, dtype=np.float64)


def envelope(x: NDArray[Any], rate: int, f0: NDArray[Any], times: NDArray[Any]) -> NDArray[Any]:
    """CheapTrick spectral envelope (power, frames x ``FFT_SIZE // 2 + 1``) at ``times``."""
    pw = _pyworld()
    with _LOCK:
        sp = pw.cheaptrick(_c64(x), _c64(f0), _c64(times), rate, f0_floor=_F0_FLOOR, fft_size=FFT_SIZE)
    return np.asarray(sp, dtype=np.float64)


def aperiodicity(x: NDArray[Any], rate: int, f0: NDArray[Any], times: NDArray[Any]) -> NDArray[Any]:
    """D4C band aperiodicity (0..1, frames x ``FFT_SIZE // 2 + 1``) at ``times``."""
    pw = _pyworld()
    with _LOCK:
        ap = pw.d4c(_c64(x), _c64(f0), _c64(times), rate, fft_size=FFT_SIZE)
    return np.asarray(ap, dtype=np.float64)


def synthesize(f0: NDArray[Any], sp: NDArray[Any], ap: NDArray[Any], rate: int, frame_period: float) -> NDArray[Any]:
    """WORLD synthesis; ``sp``/``ap`` have ``SYNTH_FFT_SIZE // 2 + 1`` bins."""
    pw = _pyworld()
    with _LOCK:
        y = pw.synthesize(_c64(f0), _c64(sp), _c64(ap), rate, frame_period)
    return np.asarray(y, dtype=np.float64)
