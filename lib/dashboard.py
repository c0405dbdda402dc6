"""What the dashboard, ``/api/cache/stats``, ``/healthz`` and the Prometheus gauges
show, read from the live components. Nothing here waits for background writes or for
the shared tier: a refresh must stay cheap whatever the load."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lib.cache.tiers import Tiers
from lib.engines.base import Engine
from lib.stats import Stats
from lib.upgrade import Readiness

if TYPE_CHECKING:
    from lib.shared.tier import SharedTier

__all__ = ["Dashboard"]


class Dashboard:
    def __init__(
        self, engine: Engine, tag: str, tiers: Tiers, stats: Stats, shared: SharedTier | None,
        readiness: Readiness | None = None,
    ) -> None:  # fmt: skip
        self.engine = engine
        self.tag = tag
        self.tiers = tiers
        self.stats = stats
        self.shared = shared
        self.readiness = readiness

    def snapshot(self, top: int = 20, *, texts: bool = True) -> dict[str, Any]:
        """Everything the dashboard and ``/api/cache/stats`` show. Without ``texts``
        (the public view) the top-phrase lists are left out: they hold user texts."""
        snap = self.stats.snapshot(top if texts else 0)
        if not texts:
            snap.pop("top_requested", None)
            snap.pop("top_missed", None)
            snap["texts"] = "hidden: the admin sees the most requested phrases"
        store = self.tiers.store.stats()
        since, total = snap["since_start"], snap["total"]
        snap.update(
            entries=store["entries"], bytes=store["bytes"], size_limit=store["size_limit"],
            memory_entries=len(self.tiers.memory), memory_bytes=self.tiers.memory.nbytes,
            hits=since["hits"], misses=since["misses"], bypasses=since["bypasses"],
            errors=since["errors"], engine_calls=since["engine_calls"],
            hits_total=total["hits"], misses_total=total["misses"],
            engine=self.engine.name, model_version=self.engine.model_version, tag=self.tag,
            cache_available=self.tiers.store.available, cache_error=self.tiers.store.last_error,
            shared=self.shared.status() if self.shared is not None else None,
            model_versions=self.readiness.versions() if self.readiness is not None else [],
        )  # fmt: skip
        return snap

    def tags(self) -> list[tuple[str, int]]:
        """The model versions (cache tags) present on disk with their entry counts,
        most entries first: what an operator may evict."""
        counts = self.tiers.store.tags()
        return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))

    def health(self, cache_dir: str) -> dict[str, Any]:
        store = self.tiers.store
        return {
            "status": "ok",
            "engine": self.engine.name,
            "model_version": self.engine.model_version,
            "cache": {"available": store.available, "dir": cache_dir, "error": store.last_error},
            # Only the breaker's state: a health check must not wait on a slow Redis.
            "shared": {"up": bool(self.shared.up)} if self.shared is not None else None,
        }

    def gauges(self) -> dict[str, Any]:
        values = dict(self.tiers.store.stats())
        values["memory_bytes"] = self.tiers.memory.nbytes
        values["engine_seconds_saved_last_hour"] = self.stats.saved_last_hour()
        values["shared_up"] = 1 if self.shared is not None and self.shared.up else 0
        return values
