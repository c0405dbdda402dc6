"""The memo of accepted prompts (:class:`lib.audio.pcm.PromptDecoder`'s): a prompt decoded
once is found again by its source, without decoding it.

A file is found by its path, size and modification time, an array by a hash of its
samples, and an upload by its bytes themselves: keyed by their length and a digest of a
sample of them (:func:`upload_key`), then compared whole: about 17 us for 600 KB here,
where hashing them costs 300 us (SHA-256) to 700 us (md5), so that the HTTP hit path can
find an uploaded prompt on the event loop. The memo keeps an upload's bytes beside its PCM, both within one byte budget,
least recently used first out.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any, Generic, Protocol, TypeVar

from numpy.typing import NDArray

__all__ = ["PromptMemo", "upload_key"]


class _Prompt(Protocol):
    """A decoded prompt as the memo sees it (:class:`lib.audio.pcm.PromptAudio`)."""

    @property
    def fingerprint(self) -> str: ...

    @property
    def pcm(self) -> NDArray[Any]: ...


P = TypeVar("P", bound=_Prompt)

#: What an upload's key digests: its first and last bytes (the header, the end of the
#: samples) and every n-th byte between; the bytes are then compared whole.
_EDGE_BYTES, _STRIDE = 4096, 997


def upload_key(raw: bytes) -> tuple[str, int, bytes]:
    """The memo key of uploaded bytes (two recordings may share one: :meth:`PromptMemo.get`
    compares the bytes)."""
    sample = b"".join((raw[:_EDGE_BYTES], raw[-_EDGE_BYTES:], raw[_EDGE_BYTES:-_EDGE_BYTES:_STRIDE]))
    return ("bytes", len(raw), hashlib.blake2b(sample, digest_size=16).digest())


class PromptMemo(Generic[P]):
    """Accepted prompts by key, bounded by ``memory_bytes``. Thread-safe."""

    def __init__(self, memory_bytes: int) -> None:
        self.memory_bytes = memory_bytes
        self._kept: OrderedDict[object, _Kept[P]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._kept)

    @property
    def nbytes(self) -> int:
        """Bytes held, PCM and uploads (at most ``memory_bytes``)."""
        return self._bytes

    def get(self, key: object, raw: bytes | None = None) -> P | None:
        """The prompt kept under ``key`` (an upload's: only for the very same ``raw``)."""
        with self._lock:
            kept = self._kept.get(key)
            if kept is None or kept.raw != raw:  # an upload's key is a sample's: other bytes, another recording
                return None
            self._kept.move_to_end(key)
            return kept.prompt

    def put(self, key: object, prompt: P, raw: bytes | None = None) -> None:
        kept = _Kept(prompt, raw)
        if kept.size > self.memory_bytes:
            return
        with self._lock:
            old = self._kept.pop(key, None)
            if old is not None:
                self._bytes -= old.size
            self._kept[key] = kept
            self._bytes += kept.size
            while self._bytes > self.memory_bytes:
                _, dropped = self._kept.popitem(last=False)
                self._bytes -= dropped.size

    def discard(self, fingerprint: str) -> int:
        """Forget every entry of the prompt with ``fingerprint``; how many there were."""
        with self._lock:
            doomed = [k for k, kept in self._kept.items() if kept.prompt.fingerprint == fingerprint]
            for k in doomed:
                self._bytes -= self._kept.pop(k).size
        return len(doomed)

    def clear(self) -> None:
        with self._lock:
            self._kept.clear()
            self._bytes = 0


class _Kept(Generic[P]):
    """A kept prompt, and for an upload its bytes (what a lookup compares)."""

    __slots__ = ("prompt", "raw", "size")

    def __init__(self, prompt: P, raw: bytes | None) -> None:
        self.prompt = prompt
        self.raw = raw
        self.size = int(prompt.pcm.nbytes) + (len(raw) if raw is not None else 0)
