"""Request statistics for the dashboard and the HTTP stats endpoint.

Counters are kept in memory (since start) and folded into a small private store
(``<cache.dir>/meta``) every few seconds, so totals survive restarts and add up over
several processes sharing a cache directory. Nothing on the hit path touches disk.

User traffic and preload traffic are counted apart (a release-time preload is not a
burst of user misses). The most requested phrases keep their whole text, the voice as
the caller named it and the settings, so the export can rebuild them exactly; at most
``max_phrases`` are kept (the least requested go first), and only for requests whose
caller allowed their text to be kept (the service passes no phrase for ``store=false``,
bypassed requests, or with ``cache.store_text: false``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any, Literal, NotRequired

from typing_extensions import TypedDict

from lib.cache.handle import DiskHandle

__all__ = ["COUNTERS", "Phrase", "PhraseRow", "Stats", "StatsSnapshot", "TopPhrase"]

_LOGGER = logging.getLogger(__name__)

#: Counters every snapshot reports (more may be added with :meth:`Stats.add`).
COUNTERS = (
    "hits", "misses", "bypasses", "errors", "engine_calls",
    "preload_hits", "preload_misses", "preload_errors",
    "engine_ms", "engine_ms_saved",
    "composed", "segments_reused", "segments_synthesised", "streams", "first_audio_ms",
)  # fmt: skip
_RESULTS = {"hit": "hits", "miss": "misses", "bypass": "bypasses", "error": "errors", "composed": "composed"}
_SAMPLES = 5000  # recent requests kept for the latency and hit-rate plots


@dataclass(frozen=True)
class Phrase:
    """A request as the statistics remember it: enough to request it again."""

    text: str
    voice: str
    """The voice as the caller named it (preset or saved voice); "" for an uploaded prompt."""
    voice_id: str
    """The key's voice field: the prompt fingerprint or ``preset:<name>``."""
    style: str = ""
    seed: int = 0
    speed: float = 1.0
    mode: str = ""


class PhraseRow(TypedDict):
    """A :class:`Phrase` with its counts, as the phrase table keeps it (in the stats store,
    by cache key). A row read back from the store is not checked: readers use ``get``."""

    text: str
    voice: str
    voice_id: str
    style: str
    seed: int
    speed: float
    mode: str
    count: int
    """Times requested (hits and misses)."""
    misses: int


class TopPhrase(PhraseRow):
    """One of the most requested (or missed) phrases in :meth:`Stats.snapshot`."""

    key: str
    """Its cache key."""


class StatsSnapshot(TypedDict):
    """:meth:`Stats.snapshot`: the counters (every name of :data:`COUNTERS`) and what follows from them."""

    since_start: dict[str, int]
    """This process's counters."""
    total: dict[str, int]
    """Every process's counters, persisted and not yet flushed."""
    hit_rate: float
    """User hits over hits and misses, since start (0.0 before any)."""
    hit_rate_total: float
    engine_seconds_saved: float
    engine_seconds_saved_total: float
    engine_seconds_saved_last_hour: float
    started: float
    """Unix time this process's statistics began."""
    top_requested: NotRequired[list[TopPhrase]]
    """Only when texts were asked for (``top`` > 0)."""
    top_missed: NotRequired[list[TopPhrase]]


class Stats:
    """Thread-safe counters, most requested phrases and recent latencies."""

    def __init__(self, store: DiskHandle | None, *, max_phrases: int = 1000, flush_every: float = 2.0) -> None:
        self._lock = threading.Lock()
        self._flushing = threading.Lock()
        """Held by a flush and by a snapshot: a snapshot never sees counts that a flush has
        taken from memory but not yet written to the store (they would be missing)."""
        self._store = store
        self.max_phrases = max_phrases
        self._since_start: Counter[str] = Counter()
        self._pending: Counter[str] = Counter()
        self._requested: Counter[str] = Counter()
        self._missed: Counter[str] = Counter()
        self._phrases: dict[str, Phrase] = {}
        self.samples: deque[tuple[float, str, float]] = deque(maxlen=_SAMPLES)
        """(unix time, result, seconds) of recent user requests."""
        self.preload_samples: deque[tuple[float, str, float]] = deque(maxlen=_SAMPLES)
        self.started = time.time()
        self._saved_by_minute: deque[list[float]] = deque(maxlen=61)
        """[minute, engine ms saved] of this process's last hour (per-hour figure)."""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if store is not None and flush_every > 0:
            self._thread = threading.Thread(target=self._loop, args=(flush_every,), name="stats-flush", daemon=True)
            self._thread.start()

    # -- recording --------------------------------------------------------------------------

    def record(
        self, result: str, seconds: float, *, key: str | None = None, phrase: Phrase | None = None,
        origin: str = "user", saved_ms: float = 0.0,
    ) -> None:  # fmt: skip
        """One request: ``result`` is hit, miss, bypass or error; ``origin`` user or
        preload; ``saved_ms`` the engine time a hit saved."""
        counter = _RESULTS[result]
        if origin == "preload":
            counter = "preload_" + counter
        now = time.time()
        with self._lock:
            self._count(counter, 1)
            if saved_ms:
                self._count("engine_ms_saved", int(saved_ms))
                minute = now // 60
                if self._saved_by_minute and self._saved_by_minute[-1][0] == minute:
                    self._saved_by_minute[-1][1] += saved_ms
                else:
                    self._saved_by_minute.append([minute, saved_ms])
            if origin == "preload":
                self.preload_samples.append((now, result, seconds))
                return
            self.samples.append((now, result, seconds))
            if key is not None and phrase is not None and result in ("hit", "miss"):
                self._requested[key] += 1
                if result == "miss":
                    self._missed[key] += 1
                self._phrases.setdefault(key, phrase)

    def add(self, counter: str, n: float = 1) -> None:
        """Add ``n`` (a whole number) to ``counter``."""
        with self._lock:
            self._count(counter, int(n))

    def engine_call(self, ms: float = 0.0) -> None:
        with self._lock:
            self._count("engine_calls", 1)
            if ms:
                self._count("engine_ms", int(ms))

    def _count(self, counter: str, n: int) -> None:
        self._since_start[counter] += n
        self._pending[counter] += n

    # -- reading ----------------------------------------------------------------------------

    def counters(self) -> dict[str, int]:
        """This process's counters since start (cheap; for the shared tier's reports)."""
        with self._lock:
            return {name: self._since_start[name] for name in COUNTERS}

    def saved_last_hour(self, now: float | None = None) -> float:
        """Engine seconds that this process's hits saved in the last 60 minutes."""
        since = ((time.time() if now is None else now) // 60) - 59
        with self._lock:
            return round(sum(ms for minute, ms in self._saved_by_minute if minute >= since) / 1000, 3)

    def snapshot(self, top: int = 20) -> StatsSnapshot:
        """Counters since start and in total, hit rates, and the ``top`` most requested
        and most missed phrases (``top=0``: none, and no text leaves this method)."""
        with self._flushing:
            return self._snapshot(top)

    def _snapshot(self, top: int) -> StatsSnapshot:
        persisted: dict[str, Any] = {}
        if self._store is not None:
            with self._store.using("stats") as cache:
                if cache is not None:
                    persisted = {name: cache.get(f"count:{name}", 0) for name in COUNTERS}
                    if top:
                        persisted["phrases"] = cache.get("phrases", {})
        with self._lock:
            since = {name: self._since_start[name] for name in COUNTERS}
            unflushed = {name: self._pending[name] for name in COUNTERS}
            table = self._merged(dict(persisted.get("phrases", {}))) if top else {}
        if persisted:
            totals = {name: int(persisted.get(name, 0)) + unflushed[name] for name in COUNTERS}
        else:
            totals = dict(since)
        snap: StatsSnapshot = {
            "since_start": since,
            "total": totals,
            "hit_rate": _rate(since["hits"], since["misses"]),
            "hit_rate_total": _rate(totals["hits"], totals["misses"]),
            "engine_seconds_saved": round(since["engine_ms_saved"] / 1000, 3),
            "engine_seconds_saved_total": round(totals["engine_ms_saved"] / 1000, 3),
            "engine_seconds_saved_last_hour": self.saved_last_hour(),
            "started": self.started,
        }
        if top:
            snap["top_requested"] = _top(table, "count", top)
            snap["top_missed"] = _top(table, "misses", top)
        return snap

    def _merged(self, table: dict[str, PhraseRow]) -> dict[str, PhraseRow]:
        """The persisted phrase table plus what is not flushed yet (lock held)."""
        for key, n in self._requested.items():
            row = table.setdefault(key, _row(self._phrases[key]))
            row["count"] = row.get("count", 0) + n
            row["misses"] = row.get("misses", 0) + self._missed.get(key, 0)
        return table

    # -- persistence ------------------------------------------------------------------------

    def flush(self) -> None:
        """Fold pending counts into the persistent store (kept in memory while it fails)."""
        if self._store is None:
            return
        with self._flushing:
            self._flush(self._store)

    def _flush(self, store: DiskHandle) -> None:
        with self._lock:
            if not self._pending and not self._requested:
                return
            pending, self._pending = self._pending, Counter()
            requested, self._requested = self._requested, Counter()
            missed, self._missed = self._missed, Counter()
            phrases, self._phrases = self._phrases, {}
        done = False
        with store.using("stats", write=True) as cache:
            if cache is not None:
                with cache.transact():
                    for name, n in pending.items():
                        cache.incr(f"count:{name}", n)
                    if requested:
                        table: dict[str, PhraseRow] = dict(cache.get("phrases", {}))
                        for key, n in requested.items():
                            row = table.setdefault(key, _row(phrases[key]))
                            row["count"] = row.get("count", 0) + n
                            row["misses"] = row.get("misses", 0) + missed.get(key, 0)
                        if len(table) > self.max_phrases:
                            table = dict(sorted(table.items(), key=lambda kv: -kv[1]["count"])[: self.max_phrases])
                        cache.set("phrases", table)
                done = True
        if not done:
            with self._lock:  # put them back so nothing is lost
                self._pending.update(pending)
                self._requested.update(requested)
                self._missed.update(missed)
                for key, phrase in phrases.items():
                    self._phrases.setdefault(key, phrase)
                self._bound()

    def _bound(self) -> None:
        """Keep at most ``max_phrases`` unflushed phrases in memory (lock held)."""
        if len(self._phrases) <= self.max_phrases:
            return
        keep = {key for key, _ in self._requested.most_common(self.max_phrases)}
        for key in list(self._phrases):
            if key not in keep:
                self._phrases.pop(key)
                self._requested.pop(key, None)
                self._missed.pop(key, None)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.flush()

    def _loop(self, every: float) -> None:
        while not self._stop.wait(every):
            self.flush()


def _row(phrase: Phrase) -> PhraseRow:
    # Every field of Phrase in its order (what dataclasses.asdict gave), then the counts.
    return {
        "text": phrase.text, "voice": phrase.voice, "voice_id": phrase.voice_id, "style": phrase.style,
        "seed": phrase.seed, "speed": phrase.speed, "mode": phrase.mode, "count": 0, "misses": 0,
    }  # fmt: skip


def _top(table: dict[str, PhraseRow], by: Literal["count", "misses"], top: int) -> list[TopPhrase]:
    rows = sorted(((k, v) for k, v in table.items() if v.get(by, 0) > 0), key=lambda kv: (-kv[1][by], kv[0]))
    return [{**v, "key": k} for k, v in rows[:top]]


def _rate(hits: int, misses: int) -> float:
    return round(hits / (hits + misses), 4) if hits + misses else 0.0
