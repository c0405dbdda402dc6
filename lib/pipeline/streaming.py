"""Audio as it is made: the hand-over between the thread that makes a result and the
one that sends it, and the byte formats a stream is sent in.

The result is made by a thread of its own (:class:`StreamJobs`), never by the one that
sends it, for whoever waited when it was started (:mod:`lib.core.waiting`): a client that
goes away stops waiting, the segment inside the engine is finished and stored, and the
segments not yet started are not made (unless another request waits for them too); the
whole is then not stored. What is sent is exactly what is
stored: the chunks join to the cached result bit for bit (:class:`lib.compose.assemble.Joiner`).

Formats: ``wav`` (a WAV header whose sizes say "unknown", 0xFFFFFFFF, then PCM as it
comes: players and libsndfile read it), ``pcm`` (raw 16-bit little-endian mono; the rate
is in the ``X-Sample-Rate`` header; ``pcm24k`` resampled to OpenAI's 24 kHz, chunk by
chunk, to the very samples of the whole) and ``mp3`` (libsndfile's LAME encoder fed chunk by
chunk, without the Xing header it can only write once the file is complete; the first
4 KiB are held back to drop its placeholder). FLAC and OGG are not streamed.
"""

from __future__ import annotations

import contextvars
import io
import logging
import queue
import struct
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import soundfile as sf
from numpy.typing import NDArray

from lib.audio.encoders import OPENAI_PCM_RATE
from lib.audio.provenance import Label
from lib.audio.resample import Resampler
from lib.audio.tagging import id3_tag, riff_info
from lib.pipeline.results import SynthesisResult

__all__ = ["STREAM_FORMATS", "Chunks", "Segment", "StreamAnswer", "StreamJobs", "encode_stream", "open_wav_header"]

_LOGGER = logging.getLogger(__name__)

STREAM_FORMATS = {"wav": "audio/wav", "pcm": "audio/pcm", "mp3": "audio/mpeg"}
_OPEN = 0xFFFFFFFF
_END = object()


@dataclass(frozen=True)
class Segment:
    """A segment (sentence) of a streamed answer is ready: the ``done``-th of ``total``,
    ``made`` by the engine now (False: found in the cache). Marked in the stream right
    before the segment's last chunk (a cached one comes as one chunk): the progress
    ("3/6 sentences") counts these marks, never chunks (an engine may stream a sentence
    in several pieces)."""

    done: int
    total: int
    made: bool


class Chunks:
    """A queue of int16 chunks; iterating it yields them until the maker closes it (and
    raises the maker's error, if it failed). :meth:`events` yields the :class:`Segment`
    marks too, in their place among the chunks."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Any] = queue.Queue()

    def put(self, pcm: NDArray[Any]) -> None:
        self._queue.put(pcm)

    def mark(self, segment: Segment) -> None:
        self._queue.put(segment)

    def close(self, error: BaseException | None = None) -> None:
        self._queue.put(_END if error is None else error)

    def __iter__(self) -> Iterator[NDArray[Any]]:
        for item in self.events():
            if not isinstance(item, Segment):
                yield item

    def events(self) -> Iterator[NDArray[Any] | Segment]:
        while True:
            item = self._queue.get()
            if item is _END:
                return
            if isinstance(item, BaseException):
                raise item
            yield item


@dataclass
class StreamAnswer:
    """A streamed answer: known at once are its key, how it is made and its rate; the
    audio comes through ``chunks``; :meth:`result` waits for the whole."""

    key: str
    cache: str
    """``HIT`` or ``COMPOSED`` (already whole), ``MISS`` or ``BYPASS`` (being made)."""
    sample_rate: int
    chunks: Iterable[NDArray[Any]]
    _done: threading.Event = field(default_factory=threading.Event, repr=False)
    _result: SynthesisResult | None = field(default=None, repr=False)
    _error: BaseException | None = field(default=None, repr=False)

    @classmethod
    def whole(cls, result: SynthesisResult) -> StreamAnswer:
        answer = cls(result.key, result.cache, result.sample_rate, [result.audio.pcm])
        answer.finished(result)
        return answer

    def events(self) -> Iterator[NDArray[Any] | Segment]:
        """The chunks with the :class:`Segment` marks among them (one iteration, as
        ``chunks``: read one or the other)."""
        if isinstance(self.chunks, Chunks):
            return self.chunks.events()
        return iter(self.chunks)

    def finished(self, result: SynthesisResult | None, error: BaseException | None = None) -> None:
        self._result, self._error = result, error
        self._done.set()

    def result(self, timeout: float | None = None) -> SynthesisResult:
        """The whole result once made; raises the error that stopped it."""
        if not self._done.wait(timeout):
            raise TimeoutError("the streamed result is not finished")
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


class StreamJobs:
    """The threads making streamed results; :meth:`close` waits for them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()

    def start(self, name: str, job: Callable[[], None]) -> None:
        """``job`` in a thread of its own, in the starter's context: for whoever waits
        for it (lib.core.waiting)."""
        context = contextvars.copy_context()

        def run() -> None:
            try:
                context.run(job)
            finally:
                with self._lock:
                    self._threads.discard(threading.current_thread())

        thread = threading.Thread(target=run, name=name, daemon=True)
        with self._lock:
            self._threads.add(thread)
        thread.start()

    def launch(
        self, key: str, cache: str, sample_rate: int, *,
        make: Callable[[Callable[[NDArray[Any]], None], Callable[[int, int, bool], None]], SynthesisResult],
        first: Callable[[], None], done: Callable[[SynthesisResult], None], failed: Callable[[BaseException], None],
    ) -> StreamAnswer:  # fmt: skip
        """A streamed answer whose result ``make(on_chunk, on_segment)`` makes in a thread
        of its own (``on_segment(done, total, made)`` marks a :class:`Segment` among the
        chunks); ``first`` when its first chunk is ready, then ``done`` or ``failed``."""
        chunks = Chunks()
        answer = StreamAnswer(key, cache, sample_rate, chunks)
        seen = threading.Event()

        def on_chunk(pcm: NDArray[Any]) -> None:
            if not seen.is_set():
                seen.set()
                first()
            chunks.put(pcm)

        def job() -> None:
            try:
                result = make(on_chunk, lambda done, total, made: chunks.mark(Segment(done, total, made)))
            except BaseException as exc:
                failed(exc)
                answer.finished(None, exc)
                chunks.close(exc)
                return
            done(result)
            answer.finished(result)
            chunks.close()

        self.start(f"stream-{key[:8]}", job)
        return answer

    def __len__(self) -> int:
        with self._lock:
            return len(self._threads)

    def close(self, timeout: float = 60.0) -> None:
        with self._lock:
            threads = list(self._threads)
        for thread in threads:
            thread.join(timeout)


def open_wav_header(sample_rate: int, info: bytes = b"") -> bytes:
    """A 16-bit mono WAV header whose RIFF and data sizes are "unknown" (0xFFFFFFFF);
    ``info`` (a whole chunk: the provenance label) goes before ``data``."""
    head = struct.pack(
        "<4sI4s4sIHHIIHH",
        b"RIFF", _OPEN, b"WAVE", b"fmt ", 16, 1, 1, sample_rate, sample_rate * 2, 2, 16,
    )  # fmt: skip
    return head + info + struct.pack("<4sI", b"data", _OPEN)


def encode_stream(
    chunks: Iterable[NDArray[Any]], sample_rate: int, fmt: str, label: Label | None = None
) -> Iterator[bytes]:
    """The bytes of a streamed answer in ``fmt`` (one of :data:`STREAM_FORMATS`, or
    ``pcm24k``: OpenAI's 24 kHz ``pcm``), each chunk as soon as it comes; the WAV header
    and the MP3 stream begin with ``label``."""
    if fmt == "mp3":
        tag = id3_tag(label)
        if tag:
            yield tag
        yield from _mp3(chunks, sample_rate)
        return
    if fmt == "pcm24k":
        resampler = Resampler(sample_rate, OPENAI_PCM_RATE)
        for pcm in chunks:
            out = resampler.push(pcm)
            if out.size:
                yield out.astype("<i2", copy=False).tobytes()
        rest = resampler.flush()
        if rest.size:
            yield rest.astype("<i2", copy=False).tobytes()
        return
    if fmt == "wav":
        yield open_wav_header(sample_rate, riff_info(label))
    elif fmt != "pcm":
        raise ValueError(f"format {fmt!r} cannot be streamed; use one of {', '.join(STREAM_FORMATS)}")
    for pcm in chunks:
        yield np.asarray(pcm, dtype="<i2").tobytes()


class _Sink(io.RawIOBase):
    """A file for libsndfile that hands on what is appended and ignores the rewrites of
    bytes already sent (the encoder's final header update)."""

    def __init__(self) -> None:
        self.size = 0
        self._pos = 0
        self._fresh: list[bytes] = []

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        self._pos = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self.size}[whence] + offset
        return self._pos

    def tell(self) -> int:
        return self._pos

    def write(self, data: Any) -> int:
        raw = bytes(data)
        end = self._pos + len(raw)
        if end > self.size:
            self._fresh.append(raw[max(self.size - self._pos, 0) :])
            self.size = end
        self._pos = end
        return len(raw)

    def take(self) -> bytes:
        out, self._fresh = b"".join(self._fresh), []
        return out


def _mp3(chunks: Iterable[NDArray[Any]], sample_rate: int) -> Iterator[bytes]:
    sink = _Sink()
    encoder = sf.SoundFile(sink, "w", samplerate=sample_rate, channels=1, format="MP3", subtype="MPEG_LAYER_III")
    head: bytes | None = b""  # bytes held until the first frame can be checked; None once it was
    try:
        for pcm in chunks:
            encoder.write(np.asarray(pcm, dtype=np.int16))
            data = sink.take()
            if head is not None:
                head += data
                if len(head) < _MP3_HEAD:
                    continue
                data, head = _without_placeholder(head), None
            if data:
                yield data
    finally:
        encoder.close()
    rest = sink.take()
    if head is not None:
        rest = _without_placeholder(head + rest)
    if rest:
        yield rest


_MP3_HEAD = 4096


def _without_placeholder(data: bytes) -> bytes:
    """The encoder writes an empty first frame, to fill with a Xing header (the frame
    count, for seeking) when the file is closed; in a stream it stays empty, and
    decoders then stop early. Drop it: a stream without the header plays in full."""
    if len(data) < 8 or data[0] != 0xFF or data[1] & 0xE0 != 0xE0:
        return data
    at = 4
    while at < len(data) and data[at] == 0:
        at += 1
    if at > 8 and at + 1 < len(data) and data[at] == 0xFF and data[at + 1] & 0xE0 == 0xE0:
        return data[at:]
    return data
