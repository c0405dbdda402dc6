"""Byte formats for values kept in Redis besides audio entries.

Anything read from Redis is untrusted input (another version of the app, an operator
with ``redis-cli``, a damaged restore), so nothing is unpickled: values are a magic
tag, a CRC-32 and a payload, and a voice record's payload is a JSON header plus the
prompt's FLAC bytes. A value that fails any check raises :class:`CorruptValueError`.

Audio entries need no wrapper: :func:`lib.cache.entry.pack` already carries the key and a
checksum, and the shared tier stores exactly the bytes the disk tier stores.
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any, cast

from lib.core.reports import VoiceRecord

__all__ = [
    "CorruptValueError", "as_bytes", "as_text", "decode_voice", "encode_voice", "read_versioned", "seal", "unseal",
]  # fmt: skip

_SEAL = struct.Struct("<4sI")  # magic, crc32 of the payload
_HEAD = struct.Struct("<I")  # length of a voice record's JSON header
PROFILE_MAGIC = b"TTSP"
VOICE_MAGIC = b"TTSV"


class CorruptValueError(ValueError):
    """A value from Redis failed its format or checksum check."""


def seal(magic: bytes, payload: bytes) -> bytes:
    """``payload`` with a 4-byte ``magic`` and its CRC-32 in front."""
    return _SEAL.pack(magic, zlib.crc32(payload)) + payload


def unseal(magic: bytes, value: bytes) -> bytes:
    """Inverse of :func:`seal`; raises :class:`CorruptValueError` on any damage."""
    if len(value) < _SEAL.size:
        raise CorruptValueError("value too short")
    found, crc = _SEAL.unpack_from(value)
    if found != magic:
        raise CorruptValueError(f"expected a {magic.decode()} value")
    payload = value[_SEAL.size :]
    if zlib.crc32(payload) != crc:
        raise CorruptValueError("checksum mismatch")
    return payload


def encode_voice(name: str, record: VoiceRecord) -> bytes:
    """A library record (``flac`` bytes plus JSON-safe fields) as a sealed value.
    The name is stored inside, so a value copied under another name is refused."""
    flac = record.get("flac")
    if not isinstance(flac, bytes):
        raise ValueError("a voice record needs its prompt as FLAC bytes under 'flac'")
    head = {k: v for k, v in record.items() if k != "flac"}
    head["name"] = name
    raw = json.dumps(head, ensure_ascii=False, sort_keys=True).encode("utf-8")  # TypeError if not JSON-safe
    return seal(VOICE_MAGIC, _HEAD.pack(len(raw)) + raw + flac)


def decode_voice(name: str, value: bytes) -> VoiceRecord:
    """Inverse of :func:`encode_voice`: a JSON object stored under ``name``, with its
    FLAC bytes; its other fields are not checked (the library reads them with defaults)."""
    payload = unseal(VOICE_MAGIC, value)
    if len(payload) < _HEAD.size:
        raise CorruptValueError("voice record too short")
    (size,) = _HEAD.unpack_from(payload)
    if _HEAD.size + size > len(payload):
        raise CorruptValueError("truncated voice record")
    try:
        head = json.loads(payload[_HEAD.size : _HEAD.size + size].decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CorruptValueError("unreadable voice record header") from exc
    if not isinstance(head, dict) or head.pop("name", None) != name:
        raise CorruptValueError("voice record stored under another name")
    head["flac"] = bytes(payload[_HEAD.size + size :])
    return cast(VoiceRecord, head)


def as_bytes(value: Any) -> bytes:
    """A value as redis-py returns it (bytes, or str with decode_responses), as bytes."""
    return value if isinstance(value, bytes) else bytes(value, "utf-8") if isinstance(value, str) else bytes(value)


def as_text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def read_versioned(client: Any, breaker: Any, op: str, table: str, rev: str) -> tuple[int, dict[Any, Any]] | None:
    """A published hash and its revision counter read together (one transaction), through
    ``breaker`` (None while Redis is down): ``(revision, fields)``, ``(0, {})`` for none."""

    def read() -> tuple[Any, Any]:
        pipe = client.pipeline(transaction=True)
        pipe.get(rev)
        pipe.hgetall(table)
        got, fields = pipe.execute()
        return got, fields

    found = breaker.call(op, read, None)
    if found is None:
        return None
    got, fields = found
    return (int(as_text(got)) if got is not None else 0), fields
