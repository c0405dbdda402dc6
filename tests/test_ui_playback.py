"""When the web UI plays a result live, and how it feeds the live player
(:class:`lib.ui.playback.LiveFeed`), with a clock the test moves: a result made within
a second is never live; a long one made fast enough goes live once 4 s exist, in slices
of at most 0.5 s that join to the whole; one made slower than it plays never goes live;
the maker's error comes through. With the stream's sentence marks, the decision is taken
again at every sentence: a cached head does not make a slow engine look fast, a slow
engine goes live once what is made covers the rest, and the progress counts sentences,
not chunks (an engine may stream a sentence in pieces). What is heard in a browser:
test_browser_playback.py."""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lib.pipeline.streaming import Chunks, Segment
from lib.ui.playback import HOLD, LIVE_AFTER, SLICE, LiveFeed, time_to_catch_up

RATE = 1000  # samples per second: one sample is a millisecond of sound


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Maker:
    """Chunks handed over by the test, as the service's maker thread would."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Any] = queue.Queue()

    def make(self, seconds: float, value: int = 1) -> NDArray[Any]:
        pcm = np.full(int(seconds * RATE), value, dtype=np.int16)
        self._queue.put(pcm)
        return pcm

    def end(self, error: BaseException | None = None) -> None:
        self._queue.put(error or StopIteration())

    def __iter__(self) -> Iterator[NDArray[Any]]:
        while True:
            item = self._queue.get()
            if isinstance(item, StopIteration):
                return
            if isinstance(item, BaseException):
                raise item
            yield item


def _collect(feed: LiveFeed) -> tuple[list[NDArray[Any]], threading.Thread]:
    out: list[NDArray[Any]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            out.extend(feed.slices(poll=0.005))
        except RuntimeError as exc:  # the maker's, handed on
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.errors = errors  # type: ignore[attr-defined]
    return out, thread


def test_a_result_made_within_the_second_is_never_live() -> None:
    clock, maker = Clock(), Maker()
    feed = LiveFeed(maker, RATE, clock=clock)
    out, thread = _collect(feed)
    for _ in range(10):  # 50 s of sound, all made at once
        maker.make(5.0)
    clock.now = 0.5
    maker.end()
    thread.join(5)
    assert out == [] and not feed.live


def test_a_long_result_made_fast_goes_live_after_hold_in_slices_that_join_to_the_whole() -> None:
    clock, maker = Clock(), Maker()
    feed = LiveFeed(maker, RATE, clock=clock)
    out, thread = _collect(feed)
    made = [maker.make(3.0, value=1)]
    clock.now = LIVE_AFTER + 0.1  # past the second, but only 3 s made: not yet (a stall would follow)
    threading.Event().wait(0.05)
    assert out == [] and not feed.live
    made.append(maker.make(3.0, value=2))  # 6 s made in 1.1 s: faster than it plays
    for _ in range(100):
        if out:
            break
        threading.Event().wait(0.01)
    assert feed.live and out
    made.append(maker.make(2.5, value=3))
    maker.end()
    thread.join(5)
    assert all(0 < len(piece) <= SLICE * RATE for piece in out)
    assert np.array_equal(np.concatenate(out), np.concatenate(made))  # every sample, once, in order
    assert feed.hold_sent
    assert HOLD < 6.0  # went live once 6 s were made, not before (3 s < HOLD)
    assert HOLD > 3.0


def test_an_engine_slower_than_it_plays_is_never_live() -> None:
    clock, maker = Clock(), Maker()
    feed = LiveFeed(maker, RATE, clock=clock)
    out, thread = _collect(feed)
    for i in range(1, 8):  # 4 s of sound every 4 s: real time, it would catch up and stall
        maker.make(4.0)
        clock.now = 4.0 * i
        threading.Event().wait(0.02)
    maker.end()
    thread.join(5)
    assert out == [] and not feed.live


def test_the_makers_error_comes_through() -> None:
    clock, maker = Clock(), Maker()
    feed = LiveFeed(maker, RATE, clock=clock)
    _, thread = _collect(feed)
    maker.make(1.0)
    maker.end(RuntimeError("the engine broke down"))
    thread.join(5)
    assert [str(e) for e in thread.errors] == ["the engine broke down"]  # type: ignore[attr-defined]


def test_with_no_hold_an_idle_feed_waits_without_failing() -> None:
    clock, maker = Clock(), Maker()
    feed = LiveFeed(maker, RATE, clock=clock, hold=0.0, live_after=0.0, min_rate=0.0)
    out, thread = _collect(feed)
    threading.Event().wait(0.05)  # live at once, nothing made yet: waits, no error
    first = maker.make(0.2)
    maker.end()
    thread.join(5)
    assert feed.live and np.array_equal(np.concatenate(out), first)


def test_the_hold_is_sent_after_its_last_slice_not_before() -> None:
    """The live player is shown once the slices sent so far hold :data:`HOLD` seconds
    (lib/ui/handlers.py): not after the first slice, and exactly after the hold's last."""
    clock, maker = Clock(), Maker()
    feed = LiveFeed(maker, RATE, clock=clock)
    maker.make(HOLD + 2.0, value=1)
    clock.now = LIVE_AFTER + 0.1
    seen = []
    for piece in feed.slices():
        seen.append((len(piece), feed.hold_sent))
        if len(seen) == int(HOLD / SLICE) + 1:
            break
    maker.end()
    hold_slices = int(HOLD / SLICE)
    assert [shown for _, shown in seen] == [False] * (hold_slices - 1) + [True, True]
    assert sum(n for n, _ in seen[:hold_slices]) == int(HOLD * RATE)


class Sentences:
    """The service's stream (:class:`lib.pipeline.streaming.Chunks`, as the maker thread
    fills it): each sentence marked, then its audio, in ``pieces`` chunks when made by
    the engine (marked before its last), whole when cached."""

    def __init__(self, total: int) -> None:
        self.chunks = Chunks()
        self.total = total
        self.done = 0

    def sentence(self, seconds: float, *, made: bool = True, pieces: int = 3) -> None:
        n = int(seconds * RATE)
        parts = np.array_split(np.ones(n, dtype=np.int16), pieces if made else 1)
        for part in parts[:-1]:
            self.chunks.put(part)
        self.done += 1
        self.chunks.mark(Segment(self.done, self.total, made))
        self.chunks.put(parts[-1])


def _until(check: Any, tries: int = 200) -> bool:
    for _ in range(tries):
        if check():
            return True
        threading.Event().wait(0.01)
    return bool(check())


def test_the_sentences_made_are_counted_not_the_chunks_and_told_before_and_while_it_plays() -> None:
    """``on_made`` counts the sentences (the stream's marks) as they are made, in the
    reader's thread: before going live (the progress bar's "2/6 sentences") and after;
    an engine that streams a sentence in three pieces still counts one."""
    clock, stream = Clock(), Sentences(6)
    feed = LiveFeed(stream.chunks.events(), RATE, total=6, clock=clock)
    told: list[int] = []
    out: list[NDArray[Any]] = []
    thread = threading.Thread(target=lambda: out.extend(feed.slices(poll=0.005, on_made=told.append)), daemon=True)
    thread.start()
    stream.sentence(1.0)
    stream.sentence(1.0)  # 2 s made: not live yet
    assert _until(lambda: told and told[-1] == 2)
    assert told[-1] == 2 and not feed.live  # two sentences of six chunks
    clock.now = LIVE_AFTER + 0.1
    for _ in range(3):
        stream.sentence(1.5)  # 6.5 s made in 1.1 s: it goes live
    assert _until(lambda: feed.live)
    stream.sentence(1.0)  # the sixth, made while it plays
    stream.chunks.close()
    thread.join(5)
    assert told == sorted(set(told)) and told[0] <= 2 and told[-1] == 6 == feed.done == feed.total
    assert sum(len(p) for p in out) == int(7.5 * RATE)


def test_a_cached_head_does_not_make_a_slow_engine_look_fast() -> None:
    """Three cached sentences (9 s at once), then new ones: not live on the cached audio
    alone (the engine's rate is unknown; decided once at the second, it went live and
    stood still between them), live once a new one shows the engine fast enough."""
    clock, stream = Clock(), Sentences(6)
    feed = LiveFeed(stream.chunks.events(), RATE, total=6, clock=clock)
    out, thread = _collect(feed)
    for _ in range(3):
        stream.sentence(3.0, made=False)
    clock.now = LIVE_AFTER + 0.5
    threading.Event().wait(0.1)
    assert out == [] and not feed.live and feed.done == 3
    clock.now = 3.0
    stream.sentence(3.0)  # made in 3 s: real time; 12 s ahead covers the last two (6 s to make)
    assert _until(lambda: feed.live)
    stream.sentence(3.0)
    stream.sentence(3.0)
    stream.chunks.close()
    thread.join(5)
    assert sum(len(p) for p in out) == 18 * RATE


def test_a_slow_engine_goes_live_once_what_is_made_covers_the_rest() -> None:
    """2 s sentences made in 4 s each (half real time), six of them: not live while the
    rest would catch up with the player, live at the fifth (10 s made, 4 s to make the
    last, which adds 2 s): the old rule (1.25x real time) never played it live."""
    clock, stream = Clock(), Sentences(6)
    feed = LiveFeed(stream.chunks.events(), RATE, total=6, clock=clock)
    out, thread = _collect(feed)
    for k in range(1, 5):
        clock.now = 4.0 * k
        stream.sentence(2.0)
        threading.Event().wait(0.1)
        assert not feed.live, f"live at sentence {k}: {2 * k} s made, {4 * (6 - k)} s to make the rest"
    clock.now = 20.0
    stream.sentence(2.0)
    assert _until(lambda: feed.live)
    clock.now = 24.0
    stream.sentence(2.0)
    stream.chunks.close()
    thread.join(5)
    assert sum(len(p) for p in out) == 12 * RATE


def test_what_is_made_ahead_covers_making_the_rest() -> None:
    """:func:`time_to_catch_up`: a fast engine needs only the next sentence's making
    ahead; a slow one all the rest's making less the sound they add; nothing left, none."""
    assert time_to_catch_up(3, 3.0, 2.0) == 1.5
    assert time_to_catch_up(3, 2.0, 0.5) == 3 * 4.0 - 2 * 2.0
    assert time_to_catch_up(0, 2.0, 0.5) == 0.0
    assert time_to_catch_up(2, 2.0, 0.0) == float("inf")
