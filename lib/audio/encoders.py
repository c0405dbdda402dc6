"""Output encoders: int16 mono PCM to every format the app serves, labelled.

| format | container, codec | by | rate |
|---|---|---|---|
| ``wav`` | RIFF, 16-bit PCM | by hand (:func:`lib.audio.pcm.wav_bytes`) | the entry's |
| ``pcm`` | none, 16-bit little-endian | numpy | the entry's (``X-Sample-Rate``) |
| ``pcm24k`` | none, 16-bit little-endian | :mod:`lib.audio.resample` | 24 kHz (OpenAI's ``pcm``) |
| ``flac`` | FLAC | libsndfile (soundfile) | the entry's |
| ``mp3`` | MPEG-1/2 layer III | libsndfile's LAME | the entry's |
| ``ogg`` | Ogg Vorbis | libsndfile's libvorbis | the entry's |
| ``opus`` | Ogg Opus, 32 kb/s | PyAV (libopus) | 24 kHz (Opus takes 8/12/16/24/48 kHz) |
| ``aac`` | ADTS, AAC-LC 64 kb/s | PyAV (FFmpeg's encoder) | the entry's |

PyAV (``av`` on PyPI) carries FFmpeg's libraries in its wheel: no ffmpeg binary at run
time. It is imported on the first opus or aac encoding only. Its muxers and encoders run
with FFmpeg's ``bitexact`` flags (no version strings, a fixed Ogg serial), so, like the
others, every format gives the same bytes for the same entry in any process.

Each file carries its provenance label (:mod:`lib.audio.tagging`); ``pcm`` cannot.
"""

from __future__ import annotations

import io
import logging
import struct
from typing import Any

import numpy as np
import soundfile as sf
from numpy.typing import NDArray

from lib.audio.pcm import wav_bytes
from lib.audio.provenance import Label
from lib.audio.resample import resample
from lib.audio.tagging import flac_labelled, id3_tag, ogg_labelled, riff_info

__all__ = ["ENCODINGS", "OPENAI_PCM_RATE", "OPUS_RATES", "encode", "opus_rate", "wav_data_offset"]

_LOGGER = logging.getLogger(__name__)

#: OpenAI documents ``pcm`` as 24 kHz 16-bit little-endian mono.
OPENAI_PCM_RATE = 24_000
#: Input rates libopus accepts.
OPUS_RATES = (8_000, 12_000, 16_000, 24_000, 48_000)
_OPUS_BITRATE = 32_000
_AAC_BITRATE = 64_000

_SF_FORMATS = {"flac": ("FLAC", "PCM_16"), "mp3": ("MP3", "MPEG_LAYER_III"), "ogg": ("OGG", "VORBIS")}

#: Every encoding :func:`encode` knows (``pcm24k`` is OpenAI's ``pcm``; not a file format).
ENCODINGS = ("wav", "flac", "mp3", "ogg", "opus", "aac", "pcm", "pcm24k")


def encode(pcm: NDArray[Any], sample_rate: int, fmt: str, label: Label | None = None) -> bytes:
    """``pcm`` (int16 mono at ``sample_rate``) as ``fmt`` (one of :data:`ENCODINGS`),
    carrying ``label`` where the container can."""
    samples = np.asarray(pcm, dtype=np.int16).reshape(-1)
    if fmt == "wav":
        return wav_bytes(samples, sample_rate, riff_info(label))
    if fmt == "pcm":
        return samples.astype("<i2", copy=False).tobytes()
    if fmt == "pcm24k":
        return resample(samples, sample_rate, OPENAI_PCM_RATE).astype("<i2", copy=False).tobytes()
    if fmt in _SF_FORMATS:
        container, subtype = _SF_FORMATS[fmt]
        buf = io.BytesIO()
        sf.write(buf, samples, sample_rate, format=container, subtype=subtype)
        data = buf.getvalue()
        if fmt == "flac":
            return flac_labelled(data, label)
        if fmt == "ogg":
            return ogg_labelled(data, label)  # also replaces libsndfile's random serial
        return id3_tag(label) + data
    if fmt == "opus":
        rate = opus_rate(sample_rate)
        data = _av_encode(resample(samples, sample_rate, rate), rate, "libopus", "ogg", _OPUS_BITRATE)
        return ogg_labelled(data, label)
    if fmt == "aac":
        return id3_tag(label) + _av_encode(samples, sample_rate, "aac", "adts", _AAC_BITRATE)
    raise ValueError(f"unknown format {fmt!r}; use one of {', '.join(ENCODINGS)}")


def wav_data_offset(wav: bytes) -> int:
    """Where the samples of a WAV file made by :func:`lib.audio.pcm.wav_bytes` begin."""
    pos = 12
    while pos + 8 <= len(wav):
        cid, size = struct.unpack_from("<4sI", wav, pos)
        if cid == b"data":
            return pos + 8
        pos += 8 + size + (size & 1)
    raise ValueError("WAV file without a data chunk")


def opus_rate(sample_rate: int) -> int:
    """The Opus input rate for audio at ``sample_rate``: the lowest that keeps its whole
    band (22.05 kHz -> 24 kHz)."""
    return next((r for r in OPUS_RATES if r >= sample_rate), OPUS_RATES[-1])


def _av_encode(pcm: NDArray[Any], rate: int, codec: str, container: str, bit_rate: int) -> bytes:
    import av  # FFmpeg's libraries: loaded only when an opus or aac answer is asked for

    buf = io.BytesIO()
    with av.open(buf, "w", format=container, container_options={"fflags": "+bitexact"}) as out:
        stream = out.add_stream(codec, rate=rate, layout="mono")
        if not isinstance(stream, av.AudioStream):  # pragma: no cover - an audio codec gives one
            raise TypeError(f"{codec} did not give an audio stream")
        stream.codec_context.bit_rate = bit_rate
        stream.codec_context.flags |= av.codec.context.Flags.bitexact
        stream.codec_context.thread_count = 1  # one thread: the same packets in any process
        frame = av.AudioFrame.from_ndarray(np.ascontiguousarray(pcm).reshape(1, -1), format="s16", layout="mono")
        frame.sample_rate = rate
        frame.pts = 0
        for packet in stream.encode(frame):
            out.mux(packet)
        for packet in stream.encode(None):
            out.mux(packet)
    return buf.getvalue()
