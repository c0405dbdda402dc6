"""Sample-rate conversion of int16 PCM, whole or chunk by chunk, with the same bytes
either way.

The filter and its alignment are scipy's ``resample_poly`` (a Kaiser-windowed FIR,
``firwin(20 * max(up, down) + 1, 1 / max(up, down), window=("kaiser", 5.0))``, zero
padding at both ends), applied here as a polyphase filter bank: each output sample is
the dot product of one phase of the filter with the input samples around it (outputs
``up`` apart share a phase, so each phase is a few strided multiply-adds). scipy has
no streaming form, and an answer streamed chunk by chunk (SSE, ``pcm`` at 24 kHz) must
join to exactly the bytes of the same answer sent whole; here every output sample is
accumulated tap by tap in the same order however the input was cut, so it does.
Float64 throughout, rounded half to even: deterministic in any process.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.signal import firwin

__all__ = ["Resampler", "resample"]

_CACHE: dict[tuple[int, int], tuple[NDArray[Any], int]] = {}


def _bank(up: int, down: int) -> tuple[NDArray[Any], int]:
    """The filter as ``up`` phases of equal length (zero padded), and the half length."""
    found = _CACHE.get((up, down))
    if found is None:
        half = 10 * max(up, down)
        h = firwin(2 * half + 1, 1.0 / max(up, down), window=("kaiser", 5.0)) * up
        taps = math.ceil(h.size / up)
        padded = np.zeros(taps * up)
        padded[: h.size] = h
        # bank[p, i] = h[p + i * up]: the taps that meet input samples at one phase.
        found = _CACHE[(up, down)] = (np.ascontiguousarray(padded.reshape(taps, up).T), half)
    return found


class Resampler:
    """Converts int16 mono PCM from ``rate_in`` to ``rate_out``: :meth:`push` chunks as
    they come, then :meth:`flush` once; the pieces join to :func:`resample` of the whole."""

    def __init__(self, rate_in: int, rate_out: int) -> None:
        if rate_in <= 0 or rate_out <= 0:
            raise ValueError(f"sample rates must be positive, got {rate_in} and {rate_out}")
        g = math.gcd(rate_in, rate_out)
        self.up, self.down = rate_out // g, rate_in // g
        bank: tuple[NDArray[Any], int] = _bank(self.up, self.down) if self.up != self.down else (np.ones((1, 1)), 0)
        self._bank, self._half = bank
        self._taps = self._bank.shape[1]
        self._buf: NDArray[Any] = np.zeros(0)
        self._base = 0  # input index of _buf[0]
        self._seen = 0  # input samples received
        self._next = 0  # next output index
        self._done = False

    def push(self, pcm: NDArray[Any]) -> NDArray[Any]:
        """The output samples that ``pcm`` completes (int16)."""
        if self._done:
            raise RuntimeError("push after flush")
        x = np.asarray(pcm, dtype=np.int16).reshape(-1)
        if self.up == self.down:
            return x.copy()
        self._buf = np.concatenate([self._buf, x.astype(np.float64)])
        self._seen += x.size
        # Output m needs inputs up to (m * down + half) // up: those received so far.
        last = (self._seen * self.up - 1 - self._half) // self.down
        return self._emit(last + 1)

    def flush(self) -> NDArray[Any]:
        """The rest of the output, the input being complete (zeros beyond its end)."""
        if self._done:
            return np.zeros(0, dtype=np.int16)
        self._done = True
        if self.up == self.down:
            return np.zeros(0, dtype=np.int16)
        total = -(-self._seen * self.up // self.down)  # ceil: scipy's output length
        return self._emit(total)

    def _emit(self, stop: int) -> NDArray[Any]:
        start = self._next
        if stop <= start:
            return np.zeros(0, dtype=np.int16)
        # The buffer with the taps' reach of zeros on both sides (before the first input
        # sample, after the last one at flush time).
        left = self._taps
        padded = np.concatenate([np.zeros(left), self._buf, np.zeros(self._taps)])
        out = np.zeros(stop - start)
        # Outputs ``up`` apart share a phase and step ``down`` inputs: one strided view per
        # tap and phase, no gathers. Each output sums its taps in order from 0.0, whatever
        # the chunking, so pieces join bit for bit.
        for r in range(min(self.up, stop - start)):
            m0 = start + r
            count = len(range(m0, stop, self.up))
            pos = m0 * self.down + self._half
            newest, phase = pos // self.up - self._base + left, pos % self.up
            taps = self._bank[phase]
            acc = np.zeros(count)
            span = (count - 1) * self.down + 1
            for i in range(self._taps):
                at = newest - i
                acc += taps[i] * padded[at : at + span : self.down]
            out[r :: self.up] = acc
        self._next = stop
        # Keep what later outputs can still reach.
        keep_from = (self._next * self.down + self._half) // self.up - self._taps + 1
        drop = max(0, min(keep_from - self._base, self._buf.size))
        if drop:
            self._buf = self._buf[drop:]
            self._base += drop
        result: NDArray[Any] = np.clip(np.rint(out), -32768, 32767).astype(np.int16)
        return result


def resample(pcm: NDArray[Any], rate_in: int, rate_out: int) -> NDArray[Any]:
    """``pcm`` (int16 mono) at ``rate_out``: the same samples a :class:`Resampler` gives
    for it in pieces."""
    r = Resampler(rate_in, rate_out)
    head = r.push(pcm)
    return np.concatenate([head, r.flush()])
