"""Prometheus metrics (all named ``tts_*``), one registry per service so that several
services in one process (tests) do not collide."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE", "Metrics"]

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

_LATENCY_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)


class _GaugeCollector(Collector):
    """Gauges computed at scrape time from the live store, so they are never stale."""

    def __init__(self, read: Callable[[], Mapping[str, Any]]) -> None:
        self._read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        values = self._read()
        yield GaugeMetricFamily("tts_cache_entries", "Entries in the disk tier", value=values.get("entries", 0))
        yield GaugeMetricFamily("tts_cache_bytes", "Bytes used by the disk tier", value=values.get("bytes", 0))
        yield GaugeMetricFamily(
            "tts_cache_size_limit_bytes", "Configured size limit of the disk tier", value=values.get("size_limit", 0)
        )
        yield GaugeMetricFamily(
            "tts_cache_effective_limit_bytes",
            "Size the disk tier is held to now (below the configured limit while the disk is full)",
            value=values.get("effective_limit", values.get("size_limit", 0)),
        )
        yield GaugeMetricFamily(
            "tts_memory_tier_bytes", "Bytes held by the in-memory tier", value=values.get("memory_bytes", 0)
        )
        yield GaugeMetricFamily(
            "tts_engine_seconds_saved_last_hour",
            "Engine seconds that cache hits saved in the last hour (this process)",
            value=values.get("engine_seconds_saved_last_hour", 0),
        )
        yield GaugeMetricFamily(
            "tts_shared_tier_up", "1 when the shared (Redis) tier is reachable", value=values.get("shared_up", 0)
        )
        yield GaugeMetricFamily(
            "tts_objects_tier_up", "1 when the object-store tier is reachable", value=values.get("objects_up", 0)
        )


class Metrics:
    """The service's instruments."""

    def __init__(self, gauges: Callable[[], Mapping[str, Any]]) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.requests = Counter("tts_cache_requests", "Synthesis requests by cache result", ["result"], registry=r)
        for result in ("hit", "miss", "bypass", "composed", "error"):
            self.requests.labels(result)
        self.latency = Histogram(
            "tts_request_duration_seconds", "Request latency by cache result", ["result"],
            buckets=_LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.engine_calls = Counter("tts_engine_calls", "Engine synthesis calls", registry=r)
        self.engine_latency = Histogram(
            "tts_engine_duration_seconds", "Engine synthesis time", buckets=_LATENCY_BUCKETS, registry=r
        )
        self.engine_seconds_saved = Counter(
            "tts_engine_seconds_saved",
            "Engine seconds that cache hits saved (what the entries cost to make)",
            registry=r,
        )
        self.voice_extractions = Counter("tts_voice_extractions", "Voice profiles extracted from prompts", registry=r)
        self.cache_errors = Counter("tts_cache_errors", "Cache store failures by operation", ["op"], registry=r)
        self.shared_errors = Counter("tts_shared_errors", "Shared (Redis) tier failures", registry=r)
        self.objects_errors = Counter("tts_objects_errors", "Object-store tier failures", registry=r)
        self.tier_hits = Counter("tts_cache_tier_hits", "Hits by the tier that served them", ["tier"], registry=r)
        self.entries_rejected = Counter(
            "tts_shared_entries_rejected",
            "Values read from a shared tier (shared: Redis, objects: the object store) refused for want of a valid "
            "tag under cache.secret: not served, made again",
            ["tier"], registry=r,
        )  # fmt: skip
        for tier in ("shared", "objects"):
            self.entries_rejected.labels(tier)
        self.segments = Counter(
            "tts_segments", "Sentence segments and template pieces, reused from the cache or synthesised",
            ["result"], registry=r,
        )  # fmt: skip
        for result in ("reused", "synthesised"):
            self.segments.labels(result)
        self.segments_cancelled = Counter(
            "tts_segments_cancelled",
            "Sentence segments and template pieces never sent to the engine because nobody waited for them any "
            "more, by reason (disconnected: the client hung up and no other request shared them)",
            ["reason"], registry=r,
        )  # fmt: skip
        self.segments_cancelled.labels("disconnected")
        self.first_audio = Histogram(
            "tts_first_audio_seconds", "Time from a streamed request to its first audio, by cache result",
            ["result"], buckets=_LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.refines = Counter(
            "tts_template_refines", "Background syntheses of composed sentences (done, failed, dropped)",
            ["result"], registry=r,
        )  # fmt: skip
        # The engine watchdog (lib.engines.watchdog); ``call`` is synthesise, stream, convert,
        # extract_voice or probe.
        self.engine_timeouts = Counter(
            "tts_engine_timeouts", "Engine calls that passed their deadline (failed with 504)", ["engine", "call"],
            registry=r,
        )  # fmt: skip
        self.engine_refused = Counter(
            "tts_engine_refused", "Engine calls refused (503) while an earlier call was stuck past its deadline",
            ["engine"], registry=r,
        )  # fmt: skip
        self.engine_probes = Counter(
            "tts_engine_probes", "Health probe syntheses by result (ok, failed, timeout)", ["engine", "result"],
            registry=r,
        )  # fmt: skip
        self.engine_invalid_audio = Counter(
            "tts_engine_invalid_audio",
            "Engine results refused (503, nothing cached) as invalid audio, by reason: non_finite, peak, empty, "
            "silent, too_short, too_long",
            ["engine", "reason"], registry=r,
        )  # fmt: skip
        self.engine_healthy = Gauge(
            "tts_engine_healthy", "1 while the engine watchdog sees the engine working; 0 while it is stuck or failing",
            registry=r,
        )  # fmt: skip
        self.engine_healthy.set(1)
        r.register(_GaugeCollector(gauges))
        # The children of the per-request instruments, found once: ``labels()`` checks its
        # arguments and takes a lock on every call, and these are counted on every request.
        self._results: dict[str, tuple[Any, Any]] = {}
        self._tiers: dict[str, Any] = {}

    def count_request(self, result: str, seconds: float) -> None:
        """One answered request: ``tts_cache_requests`` and its latency, by ``result``."""
        found = self._results.get(result)
        if found is None:
            found = self._results[result] = (self.requests.labels(result), self.latency.labels(result))
        found[0].inc()
        found[1].observe(seconds)

    def count_tier_hit(self, tier: str) -> None:
        found = self._tiers.get(tier)
        if found is None:
            found = self._tiers[tier] = self.tier_hits.labels(tier)
        found.inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
