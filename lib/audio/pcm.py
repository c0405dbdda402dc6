"""Audio decoding, canonical prompt PCM, fingerprints and encoding.

Prompt audio is decoded to canonical PCM (mono, 16 kHz, int16) and fingerprinted by
the md5 of that PCM, so the same recording in another container (WAV, FLAC, other
metadata) gives the same fingerprint. The canonical PCM is also what the engine gets.
"""

from __future__ import annotations

import hashlib
import io
import logging
import math
import os
import struct
from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import soundfile as sf
from numpy.typing import NDArray
from scipy.signal import resample_poly

from lib.audio import PROMPT_SAMPLE_RATE
from lib.audio.promptmemo import PromptMemo, upload_key
from lib.errors import EngineError, NotAudioError, PayloadTooLargeError, PromptAudioError

__all__ = [
    "FORMATS",
    "MAX_PROMPT_CHANNELS",
    "MAX_PROMPT_RATE",
    "MIME_TYPES",
    "MIN_PROMPT_RATE",
    "PromptAudio",
    "PromptDecoder",
    "PromptLimits",
    "check_engine_audio",
    "decode_flac",
    "float_to_int16",
    "wav_bytes",
]

_LOGGER = logging.getLogger(__name__)

#: Output formats and their media types (encoders: :mod:`lib.audio.encoders`). ``ogg`` is Ogg
#: Vorbis, ``opus`` Ogg Opus (resampled to 24 kHz), ``aac`` ADTS, ``pcm`` raw 16-bit
#: little-endian mono at the entry's rate.
MIME_TYPES = {
    "wav": "audio/wav",
    "flac": "audio/flac",
    "mp3": "audio/mpeg",
    "ogg": "audio/ogg",
    "opus": "audio/ogg; codecs=opus",
    "aac": "audio/aac",
    "pcm": "audio/pcm",
}
FORMATS = tuple(MIME_TYPES)

#: Sample rates a prompt may declare: telephone quality to studio masters. Outside this
#: range the header is lying or the file is not a recording of speech.
MIN_PROMPT_RATE, MAX_PROMPT_RATE = 8_000, 192_000
#: Most channels a prompt may have (they are mixed to mono; 8 covers 7.1 recorders).
MAX_PROMPT_CHANNELS = 8


class PromptAudio:
    """Canonical prompt PCM and its content fingerprint."""

    __slots__ = ("fingerprint", "pcm")

    def __init__(self, pcm: NDArray[Any]) -> None:
        self.pcm = pcm
        """Mono int16 at 16 kHz; read-only."""
        self.fingerprint = hashlib.md5(pcm.astype("<i2", copy=False).tobytes()).hexdigest()
        """md5 hex of the canonical PCM bytes."""

    @property
    def seconds(self) -> float:
        return self.pcm.size / PROMPT_SAMPLE_RATE


@dataclass(frozen=True)
class PromptLimits:
    """What a prompt upload may be, checked on its header before any sample is decoded
    (so a header that lies, a 1 Hz rate over 4 MB of samples say, costs nothing)."""

    max_seconds: float = 30.0
    """Longest prompt (``prompt.max_seconds``)."""
    max_bytes: int = 20 * 1024**2
    """Largest encoded prompt (``prompt.max_upload_bytes``)."""
    min_rate: int = MIN_PROMPT_RATE
    max_rate: int = MAX_PROMPT_RATE
    max_channels: int = MAX_PROMPT_CHANNELS


class PromptDecoder:
    """Decodes prompt audio to :class:`PromptAudio` within :class:`PromptLimits`.

    Accepted prompts are memoised (:class:`lib.audio.promptmemo.PromptMemo`, bounded in bytes),
    so a repeated upload (same bytes, or the same unchanged file) is not decoded twice,
    and an upload decoded before is found by its bytes alone (:meth:`remembered`). A
    prompt is memoised only once the caller's ``check`` accepted it and only when the
    caller may leave a trace (``remember``): a refused prompt, or the prompt of a request
    that asked for no trace, is not kept."""

    def __init__(self, limits: PromptLimits | None = None, memory_bytes: int = 32 * 1024**2) -> None:
        self.limits = limits or PromptLimits()
        self.memory_bytes = memory_bytes
        self._memo: PromptMemo[PromptAudio] = PromptMemo(memory_bytes)

    def __len__(self) -> int:
        return len(self._memo)

    @property
    def nbytes(self) -> int:
        """Bytes held by the memo, PCM and uploads (at most ``memory_bytes``)."""
        return self._memo.nbytes

    def decode(
        self,
        source: str | os.PathLike[str] | bytes | tuple[int, NDArray[Any]],
        *,
        check: Callable[[PromptAudio], None] | None = None,
        remember: bool = True,
    ) -> PromptAudio:
        """Decode a path, raw file bytes, or ``(sample_rate, samples)``; ``check`` may
        refuse the result (by raising) before it is memoised."""
        limits = self.limits
        memo_key: object
        raw: bytes | None = None
        if isinstance(source, (bytes, bytearray, memoryview)):
            raw = bytes(source)
            _check_size(len(raw), limits)
            memo_key = upload_key(raw)
        elif isinstance(source, tuple):
            rate, samples = source
            arr = np.ascontiguousarray(samples)
            if arr.ndim == 1:
                frames, channels = arr.shape[0], 1
            else:  # (samples, channels) or (channels, samples), as _as_float reads it
                frames, channels = max(arr.shape[:2]), min(arr.shape[:2])
            _check_header(int(rate), channels, frames, limits)
            memo_key = ("array", int(rate), arr.dtype.str, arr.shape, hashlib.md5(arr.tobytes()).hexdigest())
        else:
            path = Path(source)
            try:
                st = path.stat()
            except OSError as exc:
                raise NotAudioError(f"prompt audio file {path.name} cannot be read: {exc.strerror}") from exc
            _check_size(st.st_size, limits)
            memo_key = ("path", str(path.resolve()), st.st_size, st.st_mtime_ns)
        hit = self._memo.get(memo_key, raw)
        if hit is not None:
            return hit
        if isinstance(source, tuple):
            mono, rate = _mono(_as_float(source[1])), int(source[0])
        else:
            mono, rate = _read(source, limits)
        prompt = PromptAudio(_canonical(mono, rate))
        prompt.pcm.setflags(write=False)
        if check is not None:
            check(prompt)
        if remember:
            self._memo.put(memo_key, prompt, raw)
        return prompt

    def remembered(self, raw: bytes) -> PromptAudio | None:
        """The prompt decoded from these very bytes before, if it is memoised; nothing
        is decoded (cheap enough for an event loop: a sample digested, a memory compare)."""
        if len(raw) > self.limits.max_bytes:
            return None
        return self._memo.get(upload_key(raw), raw)

    def discard(self, prompt: PromptAudio) -> int:
        """Forget ``prompt`` (refused later, e.g. by the engine); return how many
        memo entries held it."""
        return self._memo.discard(prompt.fingerprint)

    def clear(self) -> None:
        self._memo.clear()


def _check_size(size: int, limits: PromptLimits) -> None:
    if size > limits.max_bytes:
        raise PayloadTooLargeError(
            f"prompt audio is {size / 1e6:.1f} MB, over the limit of {limits.max_bytes / 1e6:.1f} MB "
            "(prompt.max_upload_bytes); send a shorter recording (1-30 s is enough)"
        )


def _check_header(rate: int, channels: int, frames: int | None, limits: PromptLimits) -> None:
    """Refuse what the header says before decoding: rate, channels, duration."""
    if not limits.min_rate <= rate <= limits.max_rate:
        raise PromptAudioError(
            f"prompt audio says its sample rate is {rate} Hz; prompts must be "
            f"{limits.min_rate // 1000} kHz to {limits.max_rate // 1000} kHz: record or export it again"
        )
    if not 1 <= channels <= limits.max_channels:
        raise PromptAudioError(
            f"prompt audio has {channels} channels; at most {limits.max_channels} are accepted: "
            "export it as mono or stereo"
        )
    if frames is not None and frames > _max_frames(rate, limits):
        _too_long(frames / rate, limits)


def _check_riff_rate(source: str | os.PathLike[str] | bytes, limits: PromptLimits) -> None:
    """The sample rate a WAV header states, checked before libsndfile sees it: it
    refuses to open some out-of-range rates (0 Hz, 2^31 Hz and up) that it reads as
    invalid, which made them "not decodable" (415) while 2^31-1 Hz was a refused rate
    (422). One class, one answer: every stated rate outside the limits is 422."""
    if isinstance(source, (bytes, bytearray)):
        head = bytes(source[:_RIFF_SCAN])
    else:
        try:
            with open(source, "rb") as fh:
                head = fh.read(_RIFF_SCAN)
        except OSError:
            return  # the decoder says what is wrong with the file
    if len(head) < 12 or head[:4] not in (b"RIFF", b"RF64") or head[8:12] != b"WAVE":
        return
    at = 12
    while at + 8 <= len(head):
        chunk, size = head[at : at + 4], int.from_bytes(head[at + 4 : at + 8], "little")
        if chunk == b"fmt ":
            # A plausible fmt chunk only (16, 18 or 40 bytes); anything else is no WAV
            # header worth reading, and libsndfile calls it undecodable (415).
            if 16 <= size <= 64 and at + 24 <= len(head):
                rate = int.from_bytes(head[at + 12 : at + 16], "little")
                if not limits.min_rate <= rate <= limits.max_rate:
                    _check_header(rate, 1, None, limits)
            return
        at += 8 + size + (size & 1)  # chunks are padded to an even length


#: How much of a WAV file is scanned for its ``fmt`` chunk.
_RIFF_SCAN = 4096


def _max_frames(rate: int, limits: PromptLimits) -> int:
    return math.ceil(limits.max_seconds * rate)


def _too_long(seconds: float, limits: PromptLimits) -> None:
    shown = f"{seconds:.1f} s" if seconds < 1e6 else "far too"
    raise PromptAudioError(
        f"prompt audio is {shown} long; trim it to at most {limits.max_seconds:g} s (prompt.max_seconds)"
    )


#: libsndfile's frame count for a stream of unknown length (SF_COUNT_MAX).
_UNKNOWN_FRAMES = 2**63 - 1
_BLOCK_FRAMES = 65_536


def _read(source: str | os.PathLike[str] | bytes, limits: PromptLimits) -> tuple[NDArray[Any], int]:
    """Mono float64 samples and the rate. The header is checked first; then at most
    ``max_seconds`` of samples are decoded, block by block, each block mixed to mono
    at once (so memory is one mono copy, whatever the header claimed)."""
    fh: io.BytesIO | str = io.BytesIO(source) if isinstance(source, (bytes, bytearray)) else os.fspath(source)
    _check_riff_rate(source, limits)
    try:
        with sf.SoundFile(fh) as f:
            rate, channels, frames = int(f.samplerate), int(f.channels), int(f.frames)
            known = frames if 0 <= frames < _UNKNOWN_FRAMES else None
            _check_header(rate, channels, known, limits)
            cap = _max_frames(rate, limits)
            blocks: list[NDArray[Any]] = []
            total = 0
            while total <= cap:
                block = f.read(min(_BLOCK_FRAMES, cap + 1 - total), dtype="float64", always_2d=True)
                if block.shape[0] == 0:
                    break
                if block.shape[1] == 0:  # a header that lies about its channels after the check
                    raise NotAudioError("prompt audio has no channels: export it again as mono or stereo")
                blocks.append(block.mean(axis=1))
                total += block.shape[0]
                if block.shape[0] < _BLOCK_FRAMES and known is not None and total >= known:
                    break
    except (sf.LibsndfileError, OSError, RuntimeError, TypeError, ValueError, OverflowError, MemoryError) as exc:
        raise NotAudioError(
            "prompt audio is not decodable audio; upload a WAV, FLAC, OGG or MP3 recording of speech"
        ) from exc
    if total > cap:
        _too_long(total / rate, limits)
    mono = np.concatenate(blocks) if blocks else np.zeros(0)
    return mono, rate


def _as_float(samples: NDArray[Any]) -> NDArray[Any]:
    arr = np.asarray(samples)
    if arr.size == 0:
        raise NotAudioError("prompt audio is empty; record or upload a few seconds of speech")
    if arr.ndim == 1:
        arr = arr[:, None]
    elif arr.ndim == 2 and arr.shape[0] < arr.shape[1] and arr.shape[0] <= 8:
        arr = arr.T  # (channels, samples) -> (samples, channels)
    elif arr.ndim != 2:
        raise NotAudioError(f"prompt audio array must be 1-D or 2-D, got shape {arr.shape}")
    if np.issubdtype(arr.dtype, np.integer):
        scale = float(np.iinfo(arr.dtype).max) + 1.0
        return arr.astype(np.float64) / scale
    return arr.astype(np.float64)


def _mono(data: NDArray[Any]) -> NDArray[Any]:
    mono: NDArray[Any] = data.astype(np.float64).mean(axis=1)
    return mono


def _canonical(mono: NDArray[Any], rate: int) -> NDArray[Any]:
    if mono.size == 0 or rate <= 0:
        raise NotAudioError("prompt audio is empty; record or upload a few seconds of speech")
    if not np.all(np.isfinite(mono)):
        raise NotAudioError("prompt audio contains invalid samples (NaN or infinity)")
    if rate != PROMPT_SAMPLE_RATE:
        # Exact for every usual rate (44.1 kHz is 160/441); an odd rate (191,999 Hz)
        # would need a filter of millions of taps and seconds of CPU, so its ratio is
        # approximated within 0.01 % (an inaudible pitch change).
        ratio = Fraction(PROMPT_SAMPLE_RATE, rate).limit_denominator(1000)
        mono = resample_poly(mono, ratio.numerator, ratio.denominator)
    # Scale by 32768 (not 32767) so 16 kHz 16-bit input passes through bit-exact.
    pcm: NDArray[Any] = np.clip(np.rint(mono * 32768.0), -32768, 32767).astype(np.int16)
    return pcm


def float_to_int16(audio: NDArray[Any]) -> NDArray[Any]:
    """Clip to [-1, 1] and scale to int16 (round half to even, deterministic). In
    float32: exact enough for 16 bits, and half the memory traffic of float64."""
    scaled = np.asarray(audio, dtype=np.float32) * np.float32(32767.0)
    np.clip(scaled, -32767.0, 32767.0, out=scaled)
    np.rint(scaled, out=scaled)
    return scaled.astype(np.int16)


def check_engine_audio(audio: NDArray[Any]) -> NDArray[Any]:
    """Reject engine output that must never be cached: empty, NaN/inf, all silent."""
    arr = np.asarray(audio)
    if arr.ndim != 1:
        arr = arr.reshape(-1)
    if arr.size == 0:
        raise EngineError("the engine returned empty audio; nothing was cached, try again or change the text")
    if not np.all(np.isfinite(arr)):
        raise EngineError("the engine returned invalid samples (NaN or infinity); nothing was cached")
    pcm = float_to_int16(arr)
    if int(np.abs(pcm).max()) < 4:
        raise EngineError("the engine returned silence; nothing was cached, try again or change the text")
    return pcm


def wav_bytes(pcm: NDArray[Any], sample_rate: int, info: bytes = b"") -> bytes:
    """A 16-bit mono WAV file; ``info`` (a whole chunk, e.g. a ``LIST``/``INFO`` label)
    goes between ``fmt `` and ``data``. Built by hand: it is one header and a memory
    copy, about 20x cheaper than a general encoder on the hit path."""
    payload = pcm.astype("<i2", copy=False).tobytes()
    header = struct.pack(
        "<4sI4s4sIHHIIHH",
        b"RIFF", 36 + len(info) + len(payload), b"WAVE", b"fmt ", 16, 1, 1,
        sample_rate, sample_rate * 2, 2, 16,
    )  # fmt: skip
    return b"".join((header, info, struct.pack("<4sI", b"data", len(payload)), payload))


def decode_flac(data: bytes) -> tuple[NDArray[Any], int]:
    """FLAC bytes -> (int16 PCM, sample rate)."""
    pcm, rate = sf.read(io.BytesIO(data), dtype="int16")
    return pcm, int(rate)
