"""The one factory: every part of a service, built in order with what it needs.

:func:`wire` is the only place the parts of a :class:`lib.pipeline.service.TTSService` are
made and connected; each part gets its collaborators in its constructor, nothing is
injected afterwards. The service keeps the request path for itself and exposes the
documented parts (``voices``, ``admin``, ``dashboard``, ``files``, ``cache``,
``templates``, ``singleflight``, ``readings``, ``takes``); everything else stays private to it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lib.audio.files import ResultFiles
from lib.audio.pcm import PromptDecoder, PromptLimits
from lib.cache.keys import model_tag
from lib.cache.leases import Leases, Renewer
from lib.cache.production import Production
from lib.cache.signing import Signer
from lib.cache.stats import Stats
from lib.cache.stores import LocalStores
from lib.cache.tiers import Tiers
from lib.cache.writer import Writer
from lib.compose.composer import Composer
from lib.compose.produce import Producer
from lib.compose.refine import Refiner
from lib.compose.templatebook import TemplateBook
from lib.config import AppConfig
from lib.core.metrics import Metrics
from lib.engines import Engine, create_engine
from lib.engines.plausible import implausible
from lib.engines.watchdog import Watchdog
from lib.engines.watched import WatchedEngine
from lib.objects import configured_objects
from lib.ops.admin import Admin
from lib.ops.dashboard import Dashboard
from lib.ops.upgrade import Readiness
from lib.pipeline.recording import Recorder
from lib.pipeline.resolve import Resolver
from lib.pipeline.streaming import StreamJobs
from lib.readings import Readings, load_lexicon
from lib.request.access import AccessPolicy
from lib.takes.book import ApprovalBook
from lib.takes.operations import Takes
from lib.tenants import Tenants
from lib.voices import Voices
from lib.voices.library import VoiceLibrary
from lib.voices.profiles import VoiceProfiles

if TYPE_CHECKING:
    from lib.objects.tier import ObjectTier
    from lib.shared.tier import SharedTier

__all__ = ["FROM_ENV", "Parts", "wire"]

_LOGGER = logging.getLogger(__name__)

#: ``admin_token`` default: read the token from the environment variable named by
#: ``server.admin_token_env`` at every check (it can be rotated without a restart).
FROM_ENV: Any = object()


@dataclass
class Parts:
    """Everything one service is made of (see :func:`wire`)."""

    engine: Engine
    tag: str
    access: AccessPolicy
    watchdog: Watchdog
    metrics: Metrics
    disks: LocalStores
    stats: Stats
    shared: SharedTier | None
    objects: ObjectTier | None
    writer: Writer
    tiers: Tiers
    voices: Voices
    resolver: Resolver
    admin: Admin
    files: ResultFiles
    dashboard: Dashboard
    singleflight: Production
    recorder: Recorder
    composer: Composer
    templates: TemplateBook
    refiner: Refiner
    streams: StreamJobs
    prewarm: threading.Thread | None
    readings: Readings
    takes: Takes
    tenants: Tenants


def wire(config: AppConfig, engine: Engine | None = None, *, admin_token: Any = FROM_ENV) -> Parts:
    """Build every part of a service over ``config`` (and ``engine``, else the
    configured one). ``admin_token``: a fixed admin token (or None for none) instead of
    the environment variable; the access policy is built here once and never changed."""
    lexicon = load_lexicon(config.readings)  # first: a bad lexicon file stops the start before anything runs
    access = (
        AccessPolicy.from_config(config)
        if admin_token is FROM_ENV
        else AccessPolicy(config.server.admin_token_env, token=admin_token)
    )
    engine = engine if engine is not None else create_engine(config)
    tag = model_tag(engine.name, engine.model_version)
    gauges: list[Dashboard] = []  # the dashboard reads the stores the metrics need first
    metrics = Metrics(lambda: gauges[0].gauges() if gauges else {})
    watchdog = Watchdog(engine, config.watchdog, metrics)
    watched = WatchedEngine(engine, watchdog)  # what everything that calls the engine gets
    disks = LocalStores(
        config.cache, lambda op, exc: metrics.cache_errors.labels(op).inc(), profile_bytes=config.voices.profile_bytes
    )
    stats = Stats(disks.meta, max_phrases=config.cache.stats_phrases)
    # cache.secret: every value the shared tiers hold is tagged, and one without a valid tag is refused.
    signer = Signer.from_config(config.cache, on_reject=lambda tier: metrics.entries_rejected.labels(tier).inc())
    shared: SharedTier | None = None
    if config.cache.shared_url:
        from lib.shared.tier import SharedTier  # imports redis only when a shared tier is configured

        shared = SharedTier(
            config.cache.shared_url, on_error=metrics.shared_errors.inc, counters=stats.counters, signer=signer
        )
    objects = configured_objects(config.cache, metrics.objects_errors.inc, signer)  # None unless objects_url is set
    writer = Writer()
    tiers = Tiers(config.cache, disks.audio, shared, writer, objects, config.provenance)
    library = VoiceLibrary(disks.voices, max_saved=config.voices.max_saved, shared=shared)
    library.drop_legacy_profiles()
    # Profiles are derived data: their own store, bounded and evicted (saved voices are not).
    profiles = VoiceProfiles(
        watched, disks.profiles, config.voices.memory_bytes, on_extract=metrics.voice_extractions.inc, shared=shared
    )
    limits = PromptLimits(max_seconds=config.prompt.max_seconds, max_bytes=config.prompt.max_upload_bytes)
    decoder = PromptDecoder(limits, config.prompt.memory_bytes)
    voices = Voices(watched, library, profiles, decoder, config)
    readings = Readings(
        config, lexicon, store=disks.audio, shared=shared, voice_ids=_voice_ids(voices), contains=disks.audio.contains
    )
    resolver = Resolver(engine, voices, config, readings)
    producer = Producer(watched, voices, stats, metrics, config, reader=readings.read)
    cache_dir = Path(config.cache.dir)
    # The pin budget exists only where pins do (cost-aware); elsewhere takes are put back from their copies.
    cost_aware = config.cache.eviction_policy == "cost-aware"
    pin_budget = int(config.cache.size_limit * config.cache.pin_fraction) if cost_aware else None
    book = ApprovalBook(cache_dir / "takes", disks.audio, shared, pin_budget=pin_budget)
    tenants = Tenants(config.tenants, cache_dir / "tenants", shared, registry=metrics.registry)
    takes = Takes(book, tiers, engine, admit=lambda chars: tenants.prepaid(chars, "these takes"))
    admin = Admin(
        tiers, profiles, decoder, disks.verify_side, approvals=book,
        plausible=lambda entry: implausible(entry.pcm, entry.sample_rate, entry.meta, readings.read),
    )  # fmt: skip
    if shared is not None:  # evictions and clears on other replicas reach this one's local tiers
        shared.follow_evictions(admin.apply_remote, cache_dir / "shared-evictions.json")
    elif objects is not None:  # without Redis, evictions and clears travel through the object store
        objects.follow_evictions(admin.apply_remote, cache_dir / "objects-evictions.json")
    files = ResultFiles()
    readiness = Readiness(disks.audio, resolver.resolve, config.templates.file, tag, revision=lambda: readings.version)
    dashboard = Dashboard(
        engine, tag, tiers, stats, shared, readiness, disks, files, metrics=metrics, watchdog=watchdog,
        cache_dir=str(cache_dir), lexicon=readings.status,
    )  # fmt: skip
    gauges.append(dashboard)
    # Redis leases, else lease objects in the object store (local ones while down), else local ones.
    leases: Leases | None = (
        shared.leases(local=disks.locks) if shared is not None
        else objects.leases(local=disks.locks) if objects is not None
        else disks.locks
    )  # fmt: skip
    renewer = Renewer(leases, config.cache.lock_lease) if leases is not None else None
    recorder = Recorder(stats, metrics, config, usage=tenants.record)
    production = Production(
        tiers, leases, renewer, config.cache, on_lock_error=lambda exc: metrics.cache_errors.labels("lock").inc()
    )
    composer = Composer(production, producer, config, metrics, stats, resolver.part)
    templates = TemplateBook.configured(
        config,
        resolver.resolve,
        composer.finish,
        lambda text, voice, language: readings.read(text, voice=voice, language=language),
    )
    readiness.pieces = lambda: templates.piece_fields(readings.version)  # counted with the hot phrases
    refiner = Refiner(lambda r: composer.make(r), on_event=lambda event: metrics.refines.labels(event).inc())
    prewarm: threading.Thread | None = None
    if config.voices.prewarm:
        prewarm = threading.Thread(target=voices.prewarm, name="voice-prewarm", daemon=True)
        prewarm.start()
    return Parts(
        engine=engine, tag=tag, access=access, watchdog=watchdog, metrics=metrics, disks=disks, stats=stats,
        shared=shared, objects=objects, writer=writer, tiers=tiers, voices=voices, resolver=resolver, admin=admin,
        files=files, dashboard=dashboard, singleflight=production, recorder=recorder,
        composer=composer,
        templates=templates, refiner=refiner, streams=StreamJobs(), prewarm=prewarm, readings=readings,
        takes=takes, tenants=tenants,
    )  # fmt: skip


def _voice_ids(voices: Voices) -> Callable[[str], set[str]]:
    """A voice name's ids as entries' metadata has them (lib.readings.stale)."""

    def ids(name: str) -> set[str]:
        if voices.is_preset(name):
            return {f"preset:{name}"}
        saved = voices.saved(name)
        return {saved.prompt.fingerprint} if saved is not None else set()

    return ids
