"""Making a result on a miss: from sentence segments, or from a template's pieces.

The path, for a request whose whole result is not cached:

1. The result's key is made by :class:`lib.cache.production.Production` (a flight in
   this process, then a lease across processes, stored before it is let go): one thread
   anywhere makes it, the others wait and get it.
2. The leader splits the text into segments (:mod:`lib.compose.segments`). Each segment is a
   request of its own (same voice, style, seed, speed; only the text differs, so a
   sentence reused anywhere has the same key): looked up, or made by the same
   production under its own key, on disk before it is used. An edited paragraph costs only its new sentences.
3. Each segment is finished and joined as it comes (:mod:`lib.compose.assemble`), and handed
   to ``on_chunk`` at once, which is how an answer streams; the joined whole is stored
   under the result's key, so a repeated paragraph is one lookup.

A text of one segment stores only the finished result (as before segments existed, one
entry per short phrase), but still uses a stored segment of the same text: one made
inside a paragraph, a template piece, or an entry made before this code (its key is the
raw key it always had). When nothing is applied to it (no tail, no loudness target) its
key *is* the raw key and the path is exactly the old one: one engine call, stored.

Template answers (:meth:`Composer.compose`) join the pieces with crossfades and the
slot pauses, level the sentence as one unit and add the tail; they are not stored
(every ticket number would be a new entry), their pieces are.

Stored entries are marked in ``meta["role"]``: ``segment`` (a sentence of a longer
text), ``piece`` (a template piece, with ``meta["template"]``), ``result`` (a finished
result; a segmented one lists its ``segments`` keys). Eviction policies can use it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray
from typing_extensions import TypedDict

from lib.audio.pcm import float_to_int16
from lib.cache.entry import CachedAudio
from lib.cache.production import Production
from lib.cache.stats import Stats
from lib.compose.assemble import Finish, Joiner, PieceFinisher, to_float, trim, unit_loudness
from lib.compose.produce import OnChunk, OnSegment, Producer
from lib.compose.segments import split
from lib.compose.templatebook import Match
from lib.config import AppConfig
from lib.core.metrics import Metrics
from lib.errors import AbandonedError
from lib.request.types import Resolved

__all__ = ["Composer", "Made", "OnChunk", "OnSegment", "SegmentInfo"]

_LOGGER = logging.getLogger(__name__)


class SegmentInfo(TypedDict, total=False):
    """:meth:`Made.info`: how a segmented answer was made, merged into the result's ``info``
    (empty for an answer of one piece)."""

    segments: int
    segments_reused: int
    """Segments or pieces found in the cache."""
    segments_synthesised: int
    """Segments or pieces the engine made for this answer."""


#: Receives each finished stretch of a result (int16 PCM) as soon as it exists.
@dataclass
class Made:
    """How one answer was made."""

    cache: str
    """``MISS``, ``BYPASS``, ``COMPOSED``, or ``HIT`` when another thread or process
    made it while this one waited."""
    tier: str = ""
    segments: int = 0
    reused: int = 0
    """Segments or pieces found in the cache."""
    synthesised: int = 0
    """Segments or pieces the engine made for this answer."""
    timings: dict[str, float] = field(default_factory=dict)

    def spend(self, spent: dict[str, float]) -> None:
        for name, ms in spent.items():
            self.timings[name] = round(self.timings.get(name, 0.0) + ms, 3)

    def info(self) -> SegmentInfo:
        if not self.segments:
            return {}
        return {"segments": self.segments, "segments_reused": self.reused, "segments_synthesised": self.synthesised}


class Composer:
    """Results from segments and pieces, through the cache tiers."""

    def __init__(
        self, production: Production, producer: Producer, config: AppConfig, metrics: Metrics, stats: Stats,
        part: Callable[[Resolved, str], Resolved],
    ) -> None:  # fmt: skip
        """``part``: the raw request for one segment or piece of a request (its own text,
        and so its own reading part of the key: :meth:`lib.pipeline.resolve.Resolver.part`)."""
        self.production = production
        """Makes each missing key once and stores it (flight, lease, re-check, write, release)."""
        self.tiers = production.tiers
        self.producer = producer
        self.config = config
        self.finish = Finish.from_config(config)
        self.metrics = metrics
        self.stats = stats
        self._part = part

    # -- answers --------------------------------------------------------------------------

    def make(
        self, r: Resolved, on_chunk: OnChunk | None = None, on_segment: OnSegment | None = None
    ) -> tuple[CachedAudio, Made]:
        """The result of a cache miss, made once across threads and processes."""
        made = Made("MISS")
        # store=false: this process's flight alone, no lease and no trace in the lock store.
        entry, mine = self.production.make(
            r.key, lambda: self._build(r, made, on_chunk, on_segment, use_cache=True), store=r.store, origin=r.origin
        )
        if not mine:  # another thread or process made it meanwhile
            made = Made("HIT", tier="single-flight")
            if on_chunk is not None:
                on_chunk(entry.pcm)
        return entry, made

    def bypass(
        self, r: Resolved, on_chunk: OnChunk | None = None, on_segment: OnSegment | None = None
    ) -> tuple[CachedAudio, Made]:
        """The result made without reading or writing any tier."""
        made = Made("BYPASS")
        return self._build(r, made, on_chunk, on_segment, use_cache=False), made

    def compose(self, r: Resolved, match: Match) -> tuple[CachedAudio, Made]:
        """A template answer from its pieces (made and stored when missing)."""
        made = Made("COMPOSED")
        finish = self.finish
        joiner: Joiner | None = None
        parts: list[NDArray[Any]] = []
        rate = 0
        for i, (text, gap) in enumerate(match.pieces):
            piece = self._part(r, text)
            try:
                template = match.template.id
                raw = self._segment(piece, made, use_cache=True, store=r.store, role="piece", template=template)
            except AbandonedError as exc:
                self._cancelled(exc, len(match.pieces) - i)
                raise
            rate = raw.sample_rate
            joiner = joiner or Joiner(rate, finish.crossfade)
            last = i == len(match.pieces) - 1
            parts.append(joiner.push(trim(to_float(raw.pcm), rate), 0.0 if last else gap))
        assert joiner is not None
        parts.append(joiner.close())
        whole = finish.level(np.concatenate(parts), rate, style=r.fields.style)
        pcm = float_to_int16(np.concatenate([whole, finish.silence(finish.tail, rate)]))
        made.segments = len(match.pieces)
        meta = self.producer.meta(r, role="composed", info={"template": match.template.entry})
        return CachedAudio.from_pcm(r.key, pcm, rate, meta), made

    def piece(self, p: Resolved, template: str, *, force: bool = False, dry_run: bool = False) -> str:
        """Make sure one template piece is stored and marked as one (the preload);
        ``generated`` or ``cached``."""
        found = self.tiers.lookup(p.key)
        if found is not None and not force:
            entry = found[0]
            if entry.meta.get("role") != "piece" and not dry_run:
                # Made as a sentence before: mark it, so that eviction sees a piece.
                self.tiers.keep(_marked(entry, "piece", template), origin=p.origin)
            return "cached"
        if dry_run:
            return "generated"
        if found is not None:
            self.tiers.forget(p.key)
        made = Made("MISS")
        self._segment(p, made, use_cache=True, store=True, role="piece", template=template)
        return "generated" if made.synthesised else "cached"

    def segment_count(self, r: Resolved) -> int:
        """The segments a miss of ``r`` is made in (1 when made whole)."""
        return len(split(r.fields.text, self.finish.max_chars)) if r.fields.finish else 1

    # -- internals ------------------------------------------------------------------------

    def _build(
        self, r: Resolved, made: Made, on_chunk: OnChunk | None, on_segment: OnSegment | None, *, use_cache: bool
    ) -> CachedAudio:
        if not r.fields.finish:
            # The engine's audio is the answer, under its own raw key (the old path); a
            # streamed answer comes as the engine streams it (CosyVoice2/3: every ~25 tokens).
            try:
                entry, spent = self.producer.produce(r, on_chunk)
            except AbandonedError as exc:
                self._cancelled(exc, 1)
                raise
            made.spend(spent)
            return entry
        finish = self.finish
        segments = split(r.fields.text, finish.max_chars)
        single = len(segments) == 1
        joiner: Joiner | None = None
        chunks: list[NDArray[Any]] = []
        keys: list[str] = []
        cost = 0.0
        info: dict[str, Any] = {}
        rate = 0

        def send(out: NDArray[Any]) -> None:
            pcm = float_to_int16(out)
            chunks.append(pcm)
            if on_chunk is not None and pcm.size:
                on_chunk(pcm)

        for i, seg in enumerate(segments):
            part = self._part(r, seg.text)
            # A lone segment is not stored: it runs under the result's lease, and its engine
            # call bounds that lease (lib.cache.production.current_lease).
            store = use_cache and r.store and not single
            last = i == len(segments) - 1
            gap = 0.0 if last else finish.pause(seg.pause)
            synthesised = made.synthesised
            # A streamed answer whose segment the engine makes in pieces (the Kokoro base)
            # is finished and sent piece by piece as the engine makes them: a new sentence
            # starts to sound after its first piece. The same steps on the stored pieces
            # give the same samples (lib.compose.assemble.PieceFinisher).
            live: list[PieceFinisher] = []

            def piece(pcm: NDArray[Any], live: list[PieceFinisher] = live) -> None:
                nonlocal joiner
                if not live:
                    rate = int(self.producer.engine.sample_rate)
                    joiner = joiner or Joiner(rate, finish.crossfade)
                    joiner.begin()
                    live.append(PieceFinisher(finish, rate, style=r.fields.style))
                assert joiner is not None
                send(joiner.feed(live[0].add(pcm)))

            try:
                raw = self._segment(part, made, use_cache=use_cache, store=store, role="segment",
                                    on_piece=piece if on_chunk is not None else None)  # fmt: skip
            except AbandonedError as exc:  # nobody waits: this segment and the rest are not made
                self._cancelled(exc, len(segments) - i)
                raise
            rate = raw.sample_rate
            keys.append(raw.key)
            cost += float(raw.meta.get("engine_seconds", 0.0))
            info = info or dict(raw.meta.get("info", {}))
            joiner = joiner or Joiner(rate, finish.crossfade)
            if live:  # sent piece by piece already: its end
                out = np.concatenate([joiner.feed(live[0].end()), joiner.finish(gap)])
            else:
                unit = finish.unit(raw.pcm, rate, raw.meta, style=r.fields.style)  # a loud style stays loud
                out = joiner.push(unit, gap)
            if last:
                out = np.concatenate([out, joiner.close(finish.tail)])
            if on_segment is not None:  # the progress ("3/6"), and what the live player can count on
                on_segment(i + 1, len(segments), made.synthesised > synthesised)
            send(out)
        made.segments = len(segments)
        meta = self.producer.meta(
            r, role="result", engine_seconds=cost, info=dict(info, segments=len(segments)),
            segments=keys if not single else (),
        )  # fmt: skip
        return CachedAudio.from_pcm(r.key, np.concatenate(chunks), rate, meta)

    def _segment(
        self, part: Resolved, made: Made, *, use_cache: bool, store: bool, role: str, template: str = "",
        on_piece: OnChunk | None = None,
    ) -> CachedAudio:  # fmt: skip
        """One segment or piece: from the cache, or made (once across threads and
        processes when it is to be stored). ``on_piece``: given each piece as the engine
        makes it, when it makes this one here and in pieces (lib.compose.produce)."""
        if use_cache:
            found = self.tiers.lookup(part.key)
            if found is not None:
                self._count(made, reused=True)
                return found[0]

        def produce() -> CachedAudio:
            entry, spent = self.producer.produce(part, on_piece=on_piece)
            made.spend(spent)
            return _marked(entry, role, template, unit_loudness(entry.pcm, entry.sample_rate))

        if not (use_cache and store):
            entry = produce()
            self._count(made, reused=False)
            return entry
        # On disk before it is used (durable): a crash after this loses no finished segment.
        entry, mine = self.production.make(part.key, produce, origin=part.origin, durable=True)
        self._count(made, reused=not mine)
        return entry

    def _cancelled(self, exc: AbandonedError, left: int) -> None:
        """``left`` segments of an answer nobody waits for any more were never sent to the
        engine (the one in it, if any, ended and was stored: lib.engines.watchdog)."""
        self.metrics.segments_cancelled.labels(exc.reason).inc(left)
        _LOGGER.info("%d segment(s) not synthesised: %s", left, exc.reason)

    def _count(self, made: Made, *, reused: bool) -> None:
        name = "reused" if reused else "synthesised"
        if reused:
            made.reused += 1
        else:
            made.synthesised += 1
        self.metrics.segments.labels(name).inc()
        self.stats.add(f"segments_{name}")


def _marked(entry: CachedAudio, role: str, template: str = "", lufs: list[float] | None = None) -> CachedAudio:
    if not role:
        return entry
    meta = dict(entry.meta, role=role)
    if template:
        meta["template"] = template
    if lufs is not None:
        meta["unit_lufs"] = lufs
    return dataclasses.replace(entry, meta=meta)
