"""How a result is played in the web UI: the whole file, or live while a long miss is made.

Why not always live: Gradio's streaming audio output is HLS (hls.js in the page). Each
chunk a handler yields becomes one segment of whatever its AAC encoder has emitted by
then; the rest of a chunk arrives in a later segment, at the latest when the run ends.
hls.js reads the live playlist once, then schedules its first reload two segment
durations later (it adds the reload interval both when the playlist is loaded as the
manifest and when it is loaded as the level). With one 5 s phrase yielded at once, the
first segment held 2.88 s, the rest came at the end of the run, and the player read it
5.76 s after its first read: 2.88 s of sound, about 2.8 s of silence, then the rest. And
the ``<audio>`` element stayed mounted between requests with its old position, so a new
stream began where the last one ended (a repeat started seconds in, or played nothing).

So: every result is played from its complete file (``#result-audio``, one press plays it
once, from 0), except a miss that is still being made :data:`LIVE_AFTER` seconds after
the press *and* whose audio already made covers the time to make the rest. Only then is
the live player fed by :class:`LiveFeed`: once :data:`HOLD` seconds of audio exist, in
slices of :data:`SLICE` seconds, so that every playlist read finds several segments ahead
of the playing position; the player (a fresh element each time: it is unmounted between
requests) is shown once the hold is in its stream, so that its first read finds the whole
hold (lib/ui/handlers.py). The complete file then goes to the result player without
playing again.

Whether to go live is decided again at every sentence made (and every poll), not once:
the stream marks each segment as it is ready (:class:`lib.pipeline.streaming.Segment`:
the ``done``-th of ``total``, made by the engine or found in the cache). Cached sentences
come at once and fill the buffer; new ones come at the engine's rate, measured as the
audio the engine made per second since the press (cached audio left out: a cached head
would make a slow engine look fast, and the live player then stood still between the
cached sentences and the new ones, 0.9 s twice in 13.7 s). It goes live when the audio
made, less :data:`HOLD` spare, covers the time to make the next sentence (an engine
faster than real time) or all the rest less the sound they add (a slower one), sentence
lengths taken as the mean so far: then what is heard never catches up with what is
made. Until the first mark (one engine stream of one sentence) it goes live only at
:data:`MIN_RATE` times real time. The progress ("3/6 句 sentences") counts the marks,
never chunks: an engine may stream one sentence in several pieces.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lib.pipeline.streaming import Segment

__all__ = ["HOLD", "LIVE_AFTER", "MIN_RATE", "SLICE", "LiveFeed", "time_to_catch_up"]

_LOGGER = logging.getLogger(__name__)

LIVE_AFTER = 1.0
"""Seconds after the press: a result that is whole by then plays from its file."""
HOLD = 4.0
"""Seconds of audio made before the live player starts (several playlist reads ahead)."""
SLICE = 0.5
"""Seconds of audio per live chunk (one HLS segment each, so reads come often)."""
MIN_RATE = 1.25
"""Seconds of audio per second of waiting (since the press) needed to play live before
any sentence is marked (one engine stream): its length and the rest are unknown."""


def time_to_catch_up(left: int, each: float, rate: float) -> float:
    """The most the playing position can gain on what is made while ``left`` sentences
    of ``each`` seconds are made at ``rate`` seconds of sound per second: the buffer
    ahead of the player that keeps it from ever standing still. The time to make the
    next one when the engine is faster than real time, else the time to make them all
    less the sound all but the last add (each adds its sound once it is whole)."""
    if left <= 0:
        return 0.0
    if rate <= 0:
        return float("inf")
    return max(each / rate, left * each / rate - (left - 1) * each)


class LiveFeed:
    """The chunks of a result being made (with the :class:`Segment` marks among them, as
    :meth:`lib.pipeline.streaming.StreamAnswer.events` yields them), read by a thread of
    their own; :meth:`slices` yields them for the live player once (and only if) live
    playback will not stall."""

    def __init__(
        self, chunks: Iterable[NDArray[Any] | Segment], sample_rate: int, *, total: int = 1,
        started: float | None = None, clock: Callable[[], float] = time.monotonic, live_after: float = LIVE_AFTER,
        hold: float = HOLD, slice_seconds: float = SLICE, min_rate: float = MIN_RATE,
    ) -> None:  # fmt: skip
        self.sample_rate = sample_rate
        self._clock = clock
        self._started = clock() if started is None else started
        self._live_after, self._hold, self._min_rate = live_after, hold, min_rate
        self._hold_samples = round(hold * sample_rate)
        self._sent = 0
        self._slice = max(1, int(slice_seconds * sample_rate))
        self._parts: list[NDArray[Any]] = []
        self._samples = 0
        self._cached = 0
        """Samples of sentences found in the cache (not the engine's rate)."""
        self.done = 0
        """Sentences (segments) ready so far: the progress, from the stream's marks."""
        self.total = total
        """Sentences in all (the marks say it too)."""
        self._done = False
        self._error: BaseException | None = None
        self._changed = threading.Condition()
        self.live = False
        """Whether :meth:`slices` went live (then the result was heard already)."""
        self._reader = threading.Thread(target=self._read, args=(chunks,), name="ui-live-feed", daemon=True)
        self._reader.start()

    def _read(self, chunks: Iterable[NDArray[Any] | Segment]) -> None:
        mark: Segment | None = None  # counted with the chunk after it (the sentence's last, or whole)
        try:
            for item in chunks:
                if isinstance(item, Segment):
                    mark = item
                    continue
                with self._changed:
                    self._parts.append(np.asarray(item, dtype=np.int16))
                    self._samples += len(item)
                    if mark is not None:
                        self.done, self.total = mark.done, mark.total
                        if not mark.made:  # a cached sentence, whole: not the engine's rate
                            self._cached += len(item)
                        mark = None
                    self._changed.notify_all()
        except BaseException as exc:  # the maker's error: raised by slices()
            with self._changed:
                self._error = exc
        with self._changed:
            if mark is not None:
                self.done, self.total = mark.done, mark.total
            self._done = True
            self._changed.notify_all()

    def _should_go_live(self) -> bool:
        waited = self._clock() - self._started
        made = self._samples / self.sample_rate
        if waited < self._live_after or made < self._hold:
            return False
        if self.done < 1:  # no sentence marked yet: how long it is and what is left are unknown
            return made >= self._min_rate * waited
        rate = (self._samples - self._cached) / self.sample_rate / waited  # the engine's, since the press
        left = self.total - self.done
        return left > 0 and made - self._hold >= time_to_catch_up(left, made / self.done, rate)

    @property
    def hold_sent(self) -> bool:
        """Whether the slices yielded so far hold the whole hold: then the live player is
        shown (its first playlist read finds every segment of the hold; shown with the
        first slice it found that one alone, 0.33 s while the encoder started)."""
        return self.live and self._sent >= self._hold_samples

    def slices(self, poll: float = 0.05, on_made: Callable[[int], None] | None = None) -> Iterator[NDArray[Any]]:
        """Slices of the result for the live player, each as soon as it exists, once
        going live is decided; nothing when the result was made before that. Ends when
        the result is whole; raises the error that stopped it. ``on_made(n)`` is called
        (in the caller's thread) each time the count of sentences ready grows, live or
        not: the progress line's "3/6"."""
        sent = 0
        told = 0

        def tell() -> None:
            nonlocal told
            if on_made is not None and self.done != told:
                told = self.done
                on_made(told)

        while True:
            tell()
            with self._changed:
                if not self._done and not (self.live and self._samples > sent):
                    self._changed.wait(poll)
                if self._error is not None:
                    raise self._error
                if not self.live:
                    if self._done:
                        break
                    if not self._should_go_live():
                        continue
                    self.live = True
                    _LOGGER.debug("playing live after %.2f s", self._clock() - self._started)
                if sent >= self._samples:
                    if self._done:
                        break
                    continue
                whole = np.concatenate(self._parts) if len(self._parts) > 1 else self._parts[0]
                self._parts = [whole]
            while sent < len(whole):
                piece = whole[sent : sent + self._slice]
                sent += len(piece)
                self._sent = sent
                yield piece
        tell()  # the last sentences, made after the last look
