"""Request statistics for the dashboard and the HTTP stats endpoint.

Counters are kept in memory (since start) and folded into a small private diskcache
(``<cache.dir>/meta``) every few seconds, so totals survive restarts and add up over
several processes sharing a cache directory. Nothing on the hit path touches disk.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from pathlib import Path
from typing import Any

import diskcache

from lib.cache.diskutil import open_cache

__all__ = ["COUNTERS", "Stats"]

_LOGGER = logging.getLogger(__name__)

COUNTERS = ("hits", "misses", "bypasses", "errors", "engine_calls")
_TOP_KEEP = 500  # phrases remembered per top list
_TEXT_CUT = 80  # characters of text kept per phrase
_SAMPLES = 5000  # recent requests kept for the latency and hit-rate plots


class Stats:
    """Thread-safe counters, top phrases and recent latencies."""

    def __init__(self, directory: Path | None, flush_every: float = 2.0) -> None:
        self._lock = threading.Lock()
        self._since_start: Counter[str] = Counter()
        self._pending: Counter[str] = Counter()
        self._top_pending: dict[str, Counter[str]] = {"requested": Counter(), "missed": Counter()}
        self._texts: dict[str, str] = {}
        self._voices: dict[str, str] = {}
        self.samples: deque[tuple[float, str, float]] = deque(maxlen=_SAMPLES)
        """(unix time, result, seconds) of recent requests."""
        self.started = time.time()
        self._store: diskcache.Cache | None = None
        if directory is not None:
            try:
                self._store = open_cache(directory, eviction_policy="none")
            except Exception as exc:  # stats must never stop the service
                _LOGGER.warning("statistics will not persist: cannot open %s (%s)", directory, exc)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if self._store is not None and flush_every > 0:
            self._thread = threading.Thread(target=self._loop, args=(flush_every,), name="stats-flush", daemon=True)
            self._thread.start()

    def record(self, result: str, seconds: float, key: str | None, text: str | None, voice: str = "") -> None:
        """One request: ``result`` is hit, miss, bypass or error."""
        counter = {"hit": "hits", "miss": "misses", "bypass": "bypasses", "error": "errors"}[result]
        with self._lock:
            self._since_start[counter] += 1
            self._pending[counter] += 1
            self.samples.append((time.time(), result, seconds))
            if key is not None and result in ("hit", "miss"):
                self._top_pending["requested"][key] += 1
                if result == "miss":
                    self._top_pending["missed"][key] += 1
                if text is not None and key not in self._texts:
                    self._texts[key] = text[:_TEXT_CUT]
                    self._voices[key] = voice

    def engine_call(self) -> None:
        with self._lock:
            self._since_start["engine_calls"] += 1
            self._pending["engine_calls"] += 1

    # -- reading --------------------------------------------------------------------------

    def snapshot(self, top: int = 20) -> dict[str, Any]:
        self.flush()
        with self._lock:
            since = {name: self._since_start[name] for name in COUNTERS}
            totals = dict(since)
            tops: dict[str, dict[str, list[Any]]] = {"requested": {}, "missed": {}}
            if self._store is not None:
                try:
                    totals = {name: int(self._store.get(f"count:{name}", 0)) for name in COUNTERS}
                    for which in tops:
                        tops[which] = dict(self._store.get(f"top:{which}", {}))
                except Exception as exc:
                    _LOGGER.warning("cannot read persisted statistics: %s", exc)
            for which, pending in self._top_pending.items():
                for key, n in pending.items():  # not yet flushed (store unavailable)
                    row = tops[which].setdefault(key, [0, self._texts.get(key, ""), self._voices.get(key, "")])
                    row[0] += n
        lookups_since = since["hits"] + since["misses"]
        lookups_total = totals["hits"] + totals["misses"]
        return {
            "since_start": since,
            "total": totals,
            "hit_rate": round(since["hits"] / lookups_since, 4) if lookups_since else 0.0,
            "hit_rate_total": round(totals["hits"] / lookups_total, 4) if lookups_total else 0.0,
            "top_requested": _top_rows(tops["requested"], top),
            "top_missed": _top_rows(tops["missed"], top),
            "started": self.started,
        }

    # -- persistence ----------------------------------------------------------------------

    def flush(self) -> None:
        """Fold pending counts into the persistent store (no-op without one)."""
        if self._store is None:
            return
        with self._lock:
            pending, self._pending = self._pending, Counter()
            tops = {k: v for k, v in self._top_pending.items()}
            self._top_pending = {"requested": Counter(), "missed": Counter()}
            texts = dict(self._texts)
            voices = dict(self._voices)
        if not pending and not any(tops.values()):
            return
        try:
            with self._store.transact():
                for name, n in pending.items():
                    self._store.incr(f"count:{name}", n)
                for which, counts in tops.items():
                    if not counts:
                        continue
                    table: dict[str, list[Any]] = dict(self._store.get(f"top:{which}", {}))
                    for key, n in counts.items():
                        row = table.setdefault(key, [0, texts.get(key, ""), voices.get(key, "")])
                        row[0] += n
                    if len(table) > _TOP_KEEP:
                        table = dict(sorted(table.items(), key=lambda kv: -kv[1][0])[:_TOP_KEEP])
                    self._store.set(f"top:{which}", table)
        except Exception as exc:
            _LOGGER.warning("cannot persist statistics (%s); kept in memory", exc)
            with self._lock:  # put them back so nothing is lost
                self._pending.update(pending)
                for which, counts in tops.items():
                    self._top_pending[which].update(counts)

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.flush()
        if self._store is not None:
            self._store.close()

    def _loop(self, every: float) -> None:
        while not self._stop.wait(every):
            self.flush()


def _top_rows(table: dict[str, list[Any]], top: int) -> list[dict[str, Any]]:
    rows = sorted(table.items(), key=lambda kv: (-kv[1][0], kv[0]))[:top]
    return [{"key": k, "count": v[0], "text": v[1], "voice": v[2] if len(v) > 2 else ""} for k, v in rows]
