#!/usr/bin/env python3
"""What checking a prompt's header first costs and saves (lib/audio/pcm.py).

Decodes each case with a fresh decoder (no memo) ``--repeat`` times and prints the
median time and the peak memory traced (numpy allocations included):

- a valid 10 s prompt at 44.1 kHz, WAV and FLAC (the price of the header check and of
  block-by-block decoding on the normal path);
- a valid 10 s prompt at an odd rate, 191,999 Hz (an approximated resampling ratio);
- headers that lie: 1 Hz and 7 Hz over 4 MB of samples, a FLAC claiming 2^36 frames,
  which are refused before any sample is decoded.

    .venv/bin/python bench/bench_prompt_limits.py [--repeat 9]
"""

from __future__ import annotations

import argparse
import io
import statistics
import struct
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np
import soundfile as sf

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lib.audio.pcm import PromptDecoder
from lib.errors import TTSError


def speech(seconds: float, rate: int) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * 180 * t) * (1 + 0.5 * np.sin(2 * np.pi * 4 * t))).astype(np.float32)


def encoded(seconds: float, rate: int, fmt: str) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, speech(seconds, rate), rate, format=fmt, subtype="PCM_16")
    return buf.getvalue()


def lying_wav(rate: int, payload: bytes) -> bytes:
    head = struct.pack(
        "<4sI4s4sIHHIIHH4sI", b"RIFF", 36 + len(payload), b"WAVE", b"fmt ", 16, 1, 1, rate, rate * 2, 2, 16,
        b"data", len(payload),
    )  # fmt: skip
    return head + payload


def lying_flac() -> bytes:
    blob = bytearray(encoded(2.0, 16_000, "FLAC"))
    v = int.from_bytes(blob[18:26], "big")
    blob[18:26] = ((v >> 36) << 36 | ((1 << 36) - 1)).to_bytes(8, "big")
    return bytes(blob)


def measure(audio: bytes, repeat: int) -> tuple[float, float, str]:
    times, peaks, outcome = [], [], ""
    for _ in range(repeat):
        decoder = PromptDecoder()
        tracemalloc.start()
        started = time.perf_counter()
        try:
            prompt = decoder.decode(audio)
            outcome = f"accepted, {prompt.pcm.size} samples"
        except TTSError as exc:
            outcome = f"{exc.http_status}: {str(exc)[:60]}"
        times.append(time.perf_counter() - started)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
    return statistics.median(times) * 1e3, statistics.median(peaks) / 1e6, outcome


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=9)
    args = parser.parse_args()
    four_mb = bytes(np.random.default_rng(0).integers(0, 256, 4_000_000, dtype=np.uint8))
    cases = {
        "10 s WAV 44.1 kHz": encoded(10, 44_100, "WAV"),
        "10 s FLAC 44.1 kHz": encoded(10, 44_100, "FLAC"),
        "10 s WAV 191,999 Hz": encoded(10, 191_999, "WAV"),
        "WAV saying 1 Hz, 4 MB": lying_wav(1, four_mb),
        "WAV saying 7 Hz, 4 MB": lying_wav(7, four_mb),
        "FLAC saying 2^36 frames": lying_flac(),
    }
    print(f"{'case':<26} {'median ms':>10} {'peak MB':>8}  outcome   (median of {args.repeat})")
    for name, audio in cases.items():
        ms, mb, outcome = measure(audio, args.repeat)
        print(f"{name:<26} {ms:>10.2f} {mb:>8.1f}  {outcome}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
