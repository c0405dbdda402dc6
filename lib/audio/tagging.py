"""Writing a :class:`lib.audio.provenance.Label` into each container, the container's own way.

- WAV: a ``LIST``/``INFO`` chunk before ``data`` (ICMT comment, ICRD date, ISFT model,
  ITCH provider, and the GB 45438 record in an ``AIGC`` sub-chunk).
- MP3 and AAC (ADTS): an ID3v2.4 tag in front of the first frame (TXXX:AIGC,
  TXXX:CONTENT_ID, COMM, TENC provider, TSSE model, TDRC date). ADTS has no metadata of
  its own; an ID3 tag at its head is how HLS packed audio carries metadata (RFC 8216),
  and decoders skip it.
- FLAC: a ``VORBIS_COMMENT`` metadata block (the encoder's own, if any, replaced).
- Ogg Vorbis and Ogg Opus: the comment header packet replaced, the header pages laid
  out again, every page renumbered and its CRC recomputed.

Written by hand, not with a tagging library: each is a few fixed structures, the
result must be the same bytes in every process (tag libraries add padding and
versions), and the WAV chunk has to be built without any tagging pass at all (it goes
into the ready-to-send WAV of every entry).

Ogg pages also get a fixed stream serial number: libsndfile draws a random one for
every file, which made two encodings of one entry differ (and its strong ETag lie).
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable

from lib.audio.provenance import Label

__all__ = ["OGG_SERIAL", "flac_labelled", "id3_tag", "ogg_labelled", "riff_info"]

#: The serial number of every Ogg stream the app writes (any constant would do).
OGG_SERIAL = 0x54545341  # "TTSA"


# -- WAV ----------------------------------------------------------------------------------


def riff_info(label: Label | None) -> bytes:
    """A ``LIST`` chunk of type ``INFO`` (b"" for no label)."""
    if label is None:
        return b""
    subs = [
        (b"ICMT", label.comment()),
        (b"ICRD", label.date),
        (b"ISFT", label.model),
        (b"ITCH", label.provider),
        (b"AIGC", label.aigc()),
    ]
    body = bytearray(b"INFO")
    for cid, text in subs:
        raw = text.encode("utf-8") + b"\0"
        body += cid + struct.pack("<I", len(raw)) + raw + (b"\0" if len(raw) % 2 else b"")
    return b"LIST" + struct.pack("<I", len(body)) + bytes(body)


# -- ID3v2.4 (MP3, AAC) -------------------------------------------------------------------


def _syncsafe(n: int) -> bytes:
    return bytes(((n >> 21) & 0x7F, (n >> 14) & 0x7F, (n >> 7) & 0x7F, n & 0x7F))


def _frame(fid: bytes, body: bytes) -> bytes:
    return fid + _syncsafe(len(body)) + b"\0\0" + body


def id3_tag(label: Label | None) -> bytes:
    """An ID3v2.4 tag, UTF-8 text, no padding (b"" for no label)."""
    if label is None:
        return b""
    utf8 = b"\x03"

    def text(value: str) -> bytes:
        return utf8 + value.encode("utf-8")

    def user(name: str, value: str) -> bytes:
        return utf8 + name.encode("utf-8") + b"\0" + value.encode("utf-8")

    frames = b"".join(
        [
            _frame(b"TXXX", user("AIGC", label.aigc())),
            _frame(b"TXXX", user("CONTENT_ID", label.content_id)),
            _frame(b"COMM", utf8 + b"und" + b"\0" + label.comment().encode("utf-8")),
            _frame(b"TENC", text(label.provider)),
            _frame(b"TSSE", text(label.model)),
            _frame(b"TDRC", text(label.date)),
        ]
    )
    return b"ID3\x04\x00\x00" + _syncsafe(len(frames)) + frames


# -- Vorbis comments ------------------------------------------------------------------------


def _comment_list(vendor: bytes, fields: Iterable[tuple[str, str]]) -> bytes:
    items = [f"{name}={value}".encode() for name, value in fields]
    out = struct.pack("<I", len(vendor)) + vendor + struct.pack("<I", len(items))
    return out + b"".join(struct.pack("<I", len(item)) + item for item in items)


def _vendor(packet: bytes, start: int) -> bytes:
    """The vendor string of a Vorbis comment list beginning at ``start``."""
    if len(packet) < start + 4:
        return b""
    (size,) = struct.unpack_from("<I", packet, start)
    return packet[start + 4 : start + 4 + size]


# -- FLAC ---------------------------------------------------------------------------------

_FLAC_COMMENT = 4


def flac_labelled(data: bytes, label: Label | None) -> bytes:
    """``data`` (a FLAC file) with its Vorbis comment block replaced by the label's."""
    if label is None or data[:4] != b"fLaC":
        return data
    blocks: list[tuple[int, bytes]] = []
    pos, last = 4, False
    while not last:
        if pos + 4 > len(data):
            raise ValueError("truncated FLAC metadata")
        head = data[pos]
        last, kind = bool(head & 0x80), head & 0x7F
        size = int.from_bytes(data[pos + 1 : pos + 4], "big")
        blocks.append((kind, data[pos + 4 : pos + 4 + size]))
        pos += 4 + size
    vendor = next((_vendor(body, 0) for kind, body in blocks if kind == _FLAC_COMMENT), b"")
    kept = [(k, b) for k, b in blocks if k != _FLAC_COMMENT]
    kept.insert(1, (_FLAC_COMMENT, _comment_list(vendor, label.fields())))  # after STREAMINFO
    out = bytearray(b"fLaC")
    for i, (kind, body) in enumerate(kept):
        flag = 0x80 if i == len(kept) - 1 else 0
        out += bytes([flag | kind]) + len(body).to_bytes(3, "big") + body
    return bytes(out) + data[pos:]


# -- Ogg ----------------------------------------------------------------------------------

_BITREV = bytes(int(f"{i:08b}"[::-1], 2) for i in range(256))


def _ogg_crc(page: bytes) -> int:
    """Ogg's CRC-32 (polynomial 0x04C11DB7, not reflected, no initial or final XOR),
    through zlib's reflected CRC-32 on bit-reversed bytes: C speed, no table in Python."""
    raw = zlib.crc32(page.translate(_BITREV), 0xFFFFFFFF) ^ 0xFFFFFFFF
    return int(f"{raw:032b}"[::-1], 2)


_PAGE = struct.Struct("<4sBBqIIIB")


class _Page:
    __slots__ = ("granule", "kind", "lacing", "payload")

    def __init__(self, kind: int, granule: int, lacing: list[int], payload: bytes) -> None:
        self.kind, self.granule, self.lacing, self.payload = kind, granule, lacing, payload


def _pages(data: bytes) -> list[_Page]:
    pages: list[_Page] = []
    pos = 0
    while pos < len(data):
        if data[pos : pos + 4] != b"OggS" or pos + _PAGE.size > len(data):
            raise ValueError("not an Ogg stream")
        _, _, kind, granule, _, _, _, count = _PAGE.unpack_from(data, pos)
        lacing = list(data[pos + _PAGE.size : pos + _PAGE.size + count])
        start = pos + _PAGE.size + count
        pages.append(_Page(kind, granule, lacing, data[start : start + sum(lacing)]))
        pos = start + sum(lacing)
    return pages


def _packets(pages: list[_Page], count: int) -> tuple[list[bytes], int]:
    """The first ``count`` packets and how many pages hold them (they end a page)."""
    packets: list[bytes] = []
    current = bytearray()
    for n, page in enumerate(pages):
        at = 0
        for size in page.lacing:
            current += page.payload[at : at + size]
            at += size
            if size < 255:
                packets.append(bytes(current))
                current = bytearray()
        if len(packets) >= count and not current:
            return packets[:count], n + 1
    raise ValueError("the Ogg stream's header packets are incomplete")


def _laid_out(packets: list[bytes]) -> list[_Page]:
    """Header packets on fresh pages (at most 255 segments a page)."""
    pages: list[_Page] = []
    lacing: list[int] = []
    payload = bytearray()
    ends = False
    continued = False
    for packet in packets:
        sizes = [255] * (len(packet) // 255) + [len(packet) % 255]
        at = 0
        for i, size in enumerate(sizes):
            if len(lacing) == 255:
                pages.append(_Page(1 if continued else 0, 0 if ends else -1, lacing, bytes(payload)))
                continued = i > 0
                lacing, payload, ends = [], bytearray(), False
            lacing.append(size)
            payload += packet[at : at + size]
            at += size
        ends = True
    if lacing:
        pages.append(_Page(1 if continued else 0, 0, lacing, bytes(payload)))
    return pages


def ogg_labelled(data: bytes, label: Label | None) -> bytes:
    """``data`` (Ogg Vorbis or Ogg Opus) with the label as its comments (kept as they
    are when ``label`` is None) and the app's fixed serial number."""
    pages = _pages(data)
    first = pages[0].payload if pages else b""
    if first.startswith(b"OpusHead"):
        count, prefix, framing, vendor_at = 2, b"OpusTags", b"", 8
    elif first.startswith(b"\x01vorbis"):
        count, prefix, framing, vendor_at = 3, b"\x03vorbis", b"\x01", 7
    else:
        raise ValueError("not an Ogg Vorbis or Ogg Opus stream")
    headers, used = _packets(pages, count)
    if label is not None:
        headers[1] = prefix + _comment_list(_vendor(headers[1], vendor_at), label.fields()) + framing
    first_page = _Page(pages[0].kind, pages[0].granule, pages[0].lacing, pages[0].payload)
    out = [first_page, *_laid_out(headers[1:]), *pages[used:]]
    raw = bytearray()
    for seq, page in enumerate(out):
        head = _PAGE.pack(b"OggS", 0, page.kind, page.granule, OGG_SERIAL, seq, 0, len(page.lacing))
        body = head + bytes(page.lacing) + page.payload
        raw += body[:22] + struct.pack("<I", _ogg_crc(body)) + body[26:]
    return bytes(raw)
