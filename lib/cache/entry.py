"""One cached result, and its on-disk (and in-Redis) byte format.

Format: ``b"TTSA"``, a u32 header length, a JSON header, then FLAC audio. The header
carries the CRC-32 of the FLAC bytes, checked on every read before decoding: a corrupt
entry is detected and dropped, never served. CRC-32 rather than a cryptographic hash:
it guards against bit rot and truncation (not an adversary) and costs ~0.03 ms per
5 s clip where md5 costs ~0.2 ms, on the hit path.
"""

from __future__ import annotations

import json
import struct
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray
from typing_extensions import TypedDict

from lib.audio.encoders import encode, wav_data_offset
from lib.audio.pcm import decode_flac, wav_bytes
from lib.audio.provenance import Label, label_of
from lib.audio.tagging import riff_info

__all__ = ["CachedAudio", "CorruptEntryError", "EntryHeader", "matches_tag", "pack", "read_header", "unpack"]

_MAGIC = b"TTSA"
_HEAD = struct.Struct("<4sI")


class CorruptEntryError(ValueError):
    """A stored entry failed its format or checksum check."""


class EntryHeader(TypedDict, total=False):
    """A packed entry's JSON header (:func:`read_header`): the entry's metadata as
    :meth:`lib.compose.produce.Producer.meta` and :mod:`lib.compose.composer` build it, plus
    what :func:`pack` adds. Read back, a header is checked only for being a JSON object, and
    an entry written by another version may lack any key: readers use ``get`` and check
    the values they use."""

    key: str
    """Added by :func:`pack`, like ``sample_rate`` and ``crc32``."""
    sample_rate: int
    crc32: int
    """CRC-32 of the FLAC bytes that follow the header."""
    created: float
    duration: float
    expires: float | None
    """Unix time the entry stops being served (None: kept until evicted)."""
    engine: str
    model_version: str
    tag: str
    """``engine:model_version``."""
    voice: str
    """The key's voice field: the prompt fingerprint or ``preset:<name>``."""
    mode: str
    role: str
    """``segment``, ``piece`` or ``result`` (:mod:`lib.compose.composer`)."""
    engine_seconds: float
    info: dict[str, object]
    """The engine's own facts about the result."""
    segments: list[str]
    """The keys of a segmented result's segments."""
    template: str
    unit_lufs: list[float]
    provider: str
    """The provenance label's provider (labels on)."""
    text: str
    """With ``cache.store_text`` on, like ``style`` and ``speed``."""
    style: str
    speed: float
    phrase: str
    """The take's phrase id (a synthesis), like ``seed`` and ``voice_name``."""
    seed: int
    voice_name: str


@dataclass(frozen=True)
class CachedAudio:
    """A synthesised result, ready to send: ``wav`` is a complete WAV file, with the
    entry's provenance label (a ``LIST``/``INFO`` chunk) when it has one, built once
    here so that a hit sends it at no cost."""

    key: str
    sample_rate: int
    wav: bytes = field(repr=False)
    meta: Mapping[str, Any] = field(default_factory=dict)
    """created, duration, text (unless store_text is off), engine, model_version,
    voice, info, crc32, provider (labels on)."""
    offset: int = field(default=-1, repr=False, compare=False)
    """Where the samples begin in ``wav`` (found from the file when not given)."""

    def __post_init__(self) -> None:
        if self.offset < 0:
            object.__setattr__(self, "offset", wav_data_offset(self.wav))

    @property
    def duration(self) -> float:
        return (len(self.wav) - self.offset) / 2 / self.sample_rate

    @property
    def label(self) -> Label | None:
        """The provenance label this entry's files carry (None: labels were off)."""
        return label_of(self.key, self.meta)

    @property
    def nbytes(self) -> int:
        return len(self.wav) + 512

    # TTL lives here and nowhere else: ``meta["expires"]`` is the unix time the entry
    # stops being served (None: kept until evicted). Every tier and the HTTP layer ask
    # these three methods.

    @property
    def expires(self) -> float | None:
        value = self.meta.get("expires")
        return None if value is None else float(value)

    def remaining(self, now: float | None = None) -> float | None:
        """Seconds this entry may still be served (>= 0), or None if it never expires."""
        expires = self.expires
        if expires is None:
            return None
        return max(0.0, expires - (time.time() if now is None else now))

    def expired(self, now: float | None = None) -> bool:
        remaining = self.remaining(now)
        return remaining is not None and remaining <= 0.0

    @property
    def pcm(self) -> NDArray[Any]:
        """The int16 samples (a view of ``wav``, no copy)."""
        return np.frombuffer(self.wav, dtype="<i2", offset=self.offset)

    @classmethod
    def from_pcm(cls, key: str, pcm: NDArray[Any], sample_rate: int, meta: Mapping[str, Any]) -> CachedAudio:
        """An entry; labelled when ``meta`` names the provider it is made under."""
        full = dict(meta)
        full.setdefault("created", time.time())
        full["duration"] = round(pcm.size / sample_rate, 4)
        return _built(key, pcm, sample_rate, full)

    def encoded(self, fmt: str) -> bytes:
        """This entry's audio as ``fmt`` (:data:`lib.audio.encoders.ENCODINGS`), labelled; the
        WAV is the ready one, a transcode is made anew (the tiers keep those)."""
        if fmt == "wav":
            return self.wav
        if fmt == "pcm":
            return self.wav[self.offset :]
        return encode(self.pcm, self.sample_rate, fmt, self.label)

    def relabelled(self, provider: str | None) -> CachedAudio:
        """This entry under ``provider`` (None: unlabelled); itself when it already is."""
        if self.meta.get("provider") == provider:
            return self
        meta = {k: v for k, v in self.meta.items() if k != "provider"}
        if provider is not None:
            meta["provider"] = provider
        return _built(self.key, self.pcm, self.sample_rate, meta)


def _built(key: str, pcm: NDArray[Any], sample_rate: int, meta: Mapping[str, Any]) -> CachedAudio:
    info = riff_info(label_of(key, meta))
    wav = wav_bytes(pcm, sample_rate, info)
    return CachedAudio(key, sample_rate, wav, meta, offset=len(wav) - pcm.size * 2)


def pack(entry: CachedAudio) -> bytes:
    """Serialise for the disk or shared tier (FLAC, lossless: about half of WAV)."""
    flac = encode(entry.pcm, entry.sample_rate, "flac")
    head = dict(entry.meta)
    head.update(key=entry.key, sample_rate=entry.sample_rate, crc32=zlib.crc32(flac))
    raw = json.dumps(head, ensure_ascii=False, sort_keys=True).encode("utf-8")
    return _HEAD.pack(_MAGIC, len(raw)) + raw + flac


def read_header(blob: bytes) -> EntryHeader:
    """The JSON header alone (no audio decode), e.g. for scans by voice."""
    if len(blob) < _HEAD.size:
        raise CorruptEntryError("entry too short")
    magic, size = _HEAD.unpack_from(blob)
    if magic != _MAGIC or _HEAD.size + size > len(blob):
        raise CorruptEntryError("bad entry header")
    try:
        head: object = json.loads(blob[_HEAD.size : _HEAD.size + size].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptEntryError("unreadable entry header") from exc
    if not isinstance(head, dict):
        raise CorruptEntryError("bad entry header")
    return cast("EntryHeader", head)  # any JSON object: its values are checked where they are used


def matches_tag(head: Mapping[str, Any], tag: str) -> bool:
    """Whether the entry with header ``head`` falls under ``tag``: its
    ``engine:model_version``, or ``voice:<voice id>`` (every entry made in that voice)."""
    if tag.startswith("voice:"):
        return head.get("voice") == tag[len("voice:") :]
    return head.get("tag") == tag


def unpack(blob: bytes, key: str) -> CachedAudio:
    """Verify and decode. Raises :class:`CorruptEntryError` on any damage, including
    an entry stored under another key."""
    head = read_header(blob)
    start = _HEAD.size + _HEAD.unpack_from(blob)[1]
    flac = memoryview(blob)[start:]
    if head.get("key") != key:
        raise CorruptEntryError("entry stored under another key")
    if zlib.crc32(flac) != head.get("crc32"):
        raise CorruptEntryError("checksum mismatch")
    try:
        pcm, rate = decode_flac(bytes(flac))
    except Exception as exc:  # libsndfile raises several types on damaged streams
        raise CorruptEntryError("undecodable audio") from exc
    if rate != head.get("sample_rate") or pcm.ndim != 1 or pcm.size == 0:
        raise CorruptEntryError("audio does not match its header")
    head.pop("key", None)
    head.pop("sample_rate", None)
    return _built(key, pcm, rate, head)
