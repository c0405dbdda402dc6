"""What the dashboard, ``/api/cache/stats``, ``/healthz`` and the Prometheus gauges
show, read from the live components. Nothing here waits for background writes or for
the shared tier: a refresh must stay cheap whatever the load."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from typing_extensions import TypedDict

from lib.audio.files import ResultFiles
from lib.cache.stats import Stats, StatsSnapshot
from lib.cache.stores import LocalStores
from lib.cache.tiers import Tiers
from lib.core.reports import Gauges, HealthReport, LexiconStatus, StoreState, TierUp
from lib.engines.base import Engine
from lib.ops.upgrade import Readiness, VersionRow
from lib.request.access import Action, Caller, allows

if TYPE_CHECKING:
    from lib.core.metrics import Metrics
    from lib.engines.watchdog import Watchdog
    from lib.objects.tier import ObjectsStatus, ObjectTier
    from lib.shared.tier import SharedStatus, SharedTier

__all__ = ["Dashboard", "DashboardSnapshot"]


class _Hidden(TypedDict, total=False):
    """What :class:`DashboardSnapshot` says in place of the top phrases for a caller who may not read them."""

    texts: str
    """Why the top phrases are missing (a caller who may not read users' texts)."""


class DashboardSnapshot(StatsSnapshot, _Hidden):
    """:meth:`Dashboard.snapshot`: the request statistics, then the stores, the engine and
    the other tiers (``/api/cache/stats``, the Cache tab)."""

    entries: int
    """Entries on disk (the sum over model versions)."""
    bytes: int
    size_limit: int
    effective_limit: int
    memory_entries: int
    memory_bytes: int
    hits: int
    """This process's user hits (``since_start``), like ``misses``... ``engine_calls``."""
    misses: int
    bypasses: int
    errors: int
    engine_calls: int
    hits_total: int
    """Every process's (``total``), like ``misses_total``."""
    misses_total: int
    engine: str
    model_version: str
    tag: str
    cache_available: bool
    cache_error: str | None
    shared: SharedStatus | None
    """None: no shared tier configured."""
    objects: ObjectsStatus | None
    """None: no object store configured."""
    model_versions: list[VersionRow]
    lexicon: LexiconStatus | None


class Dashboard:
    """Statistics, health and gauges of one service (the ``dashboard`` part)."""

    def __init__(
        self,
        engine: Engine,
        tag: str,
        tiers: Tiers,
        stats: Stats,
        shared: SharedTier | None,
        readiness: Readiness | None = None,
        disks: LocalStores | None = None,
        files: ResultFiles | None = None,
        *,
        metrics: Metrics,
        watchdog: Watchdog | None = None,
        cache_dir: str = "",
        lexicon: Callable[[], LexiconStatus] | None = None,
    ) -> None:
        self.engine = engine
        self.tag = tag
        self.tiers = tiers
        self.stats = stats
        """Request counters and samples (lib.cache.stats)."""
        self.metrics = metrics
        """The Prometheus metrics (``/metrics``), when this dashboard serves them."""
        self.shared = shared
        self.readiness = readiness
        self.disks = disks
        self.files = files
        self.watchdog = watchdog
        self.cache_dir = cache_dir
        self._lexicon = lexicon
        """The lexicon's state and its last changes (lib.readings.Readings.status)."""

    @property
    def objects(self) -> ObjectTier | None:
        """The object-store tier, if configured (reached through the tiers)."""
        return cast("ObjectTier | None", self.tiers.objects)

    def snapshot(self, top: int = 20, *, caller: Caller) -> DashboardSnapshot:
        """Everything the dashboard and ``/api/cache/stats`` show. For a caller who may
        not read users' texts (the public view) the top-phrase lists are left out.
        ``lexicon``: the operator's lexicon and its last changes, each with the number of
        cached entries it made stale (``lexicon.last_change.stale``)."""
        texts = allows(caller, Action.READ_TEXTS)
        snap = self.stats.snapshot(top if texts else 0)
        hidden: _Hidden = {}
        if not texts:
            snap.pop("top_requested", None)
            snap.pop("top_missed", None)
            hidden["texts"] = "hidden: the admin sees the most requested phrases"
        store = self.tiers.store.stats()
        # One reading of the entries per model version for every figure that counts
        # entries (the total and each version's line), so they agree on one panel.
        counts = self.tiers.store.tags()
        entries = sum(counts.values()) if counts else store["entries"]
        since, total = snap["since_start"], snap["total"]
        return {
            **snap, **hidden,
            "entries": entries, "bytes": store["bytes"], "size_limit": store["size_limit"],
            "effective_limit": store.get("effective_limit", store["size_limit"]),
            "memory_entries": len(self.tiers.memory), "memory_bytes": self.tiers.memory.nbytes,
            "hits": since["hits"], "misses": since["misses"], "bypasses": since["bypasses"],
            "errors": since["errors"], "engine_calls": since["engine_calls"],
            "hits_total": total["hits"], "misses_total": total["misses"],
            "engine": self.engine.name, "model_version": self.engine.model_version, "tag": self.tag,
            "cache_available": self.tiers.store.available, "cache_error": self.tiers.store.last_error,
            "shared": self.shared.status() if self.shared is not None else None,
            "objects": self.objects.status() if self.objects is not None else None,
            "model_versions": self.readiness.versions(counts) if self.readiness is not None else [],
            "lexicon": self._lexicon() if self._lexicon is not None else None,
        }  # fmt: skip

    def tags(self) -> list[tuple[str, int]]:
        """The model versions (cache tags) present on disk with their entry counts,
        most entries first: what an operator may evict."""
        counts = self.tiers.store.tags()
        return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))

    def health(self) -> HealthReport:
        """The truth about every store: ``status`` is "degraded", with one reason per
        problem, while any of them is unusable (requests are still served, from what
        works); "ok" otherwise. Checking reopens a store whose reopen is due, and
        notices a deleted or replaced cache directory."""
        store = self.tiers.store
        stores: dict[str, StoreState] = {}
        if self.disks is not None:
            stores = {name: handle.status() for name, handle in self.disks.handles.items()}
        else:
            stores["audio"] = store.handle.status()
        if self.files is not None:
            stores["results"] = self.files.status()
        reasons = [
            f"{name} store: {state['error'] or 'cannot be opened'}"
            for name, state in stores.items()
            if not state["available"] or state["error"]
        ]
        if store.disk_full:
            reasons.append(
                f"disk full: the audio store is held to {store.effective_limit} bytes "
                f"of cache.size_limit {store.config.size_limit}"
            )
        # Only the breaker's state: a health check must not wait on a slow Redis.
        shared: TierUp | None = {"up": bool(self.shared.up)} if self.shared is not None else None
        if self.shared is not None and not self.shared.up:
            reasons.append(f"shared tier {self.shared.url} unreachable; serving from local tiers")
        objects: TierUp | None = {"up": bool(self.objects.up)} if self.objects is not None else None
        if self.objects is not None and not self.objects.up:
            reasons.append(f"object store {self.objects.url} unreachable; serving from the other tiers")
        audio = stores["audio"]
        health: HealthReport = {
            "status": "degraded" if reasons else "ok",
            "reasons": reasons,
            "engine": self.engine.name,
            "base": str(getattr(self.engine, "base", "") or ""),
            "model_version": self.engine.model_version,
            "cache": {"available": audio["available"], "dir": self.cache_dir, "error": audio["error"]},
            "stores": stores,
            "shared": shared,
            "objects": objects,
        }
        return self.watchdog.annotate(health) if self.watchdog is not None else health

    def gauges(self) -> Gauges:
        return {
            **self.tiers.store.stats(),
            "memory_bytes": self.tiers.memory.nbytes,
            "engine_seconds_saved_last_hour": self.stats.saved_last_hour(),
            "shared_up": 1 if self.shared is not None and self.shared.up else 0,
            "objects_up": 1 if self.objects is not None and self.objects.up else 0,
        }
