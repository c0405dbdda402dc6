"""The shapes of results that cross module boundaries: what the admin actions, the
stores and the voice library report to the front ends (the HTTP API answers them as JSON,
the UI turns them into sentences). Typed dictionaries: they are plain dictionaries at run
time, so they serialise as they are; the type checker holds every producer and reader
to one shape.
"""

from __future__ import annotations

from typing import Literal, NotRequired  # pydantic reads these on Python 3.11

from typing_extensions import TypedDict

__all__ = [
    "CacheHealth",
    "ClearReport",
    "ConsentRecord",
    "EngineHealth",
    "EvictReport",
    "Gauges",
    "HealthReport",
    "LexiconChange",
    "LexiconStatus",
    "ProbeResult",
    "StoreState",
    "StoreStats",
    "SweepReport",
    "TierUp",
    "VerifyReport",
    "VoiceInfo",
    "VoiceRecord",
]


class ClearReport(TypedDict):
    """``Admin.clear``: what left every tier (saved voices stay)."""

    removed: int
    shared_removed: int
    profiles_removed: int
    objects_removed: NotRequired[int]
    approved_kept: NotRequired[int]
    """Approved takes kept (put back from their copies): all of them unless dropped."""
    approved_dropped: NotRequired[int]
    """Approved takes dropped, their approvals withdrawn (``drop_approved``)."""


class EvictReport(TypedDict):
    """``Admin.evict``: one tag's entries removed; None for a shared tier that could not
    be reached (its copies stay: evict again later)."""

    tag: str
    removed: int
    shared_removed: NotRequired[int | None]
    objects_removed: NotRequired[int | None]
    approved_kept: NotRequired[int]
    """Approved takes of that tag kept (evicting a model version never drops them)."""


class SweepReport(TypedDict):
    """``Admin.sweep_expired``."""

    expired_removed: int
    objects_expired_removed: NotRequired[int | None]


class VerifyReport(TypedDict):
    """``AudioStore.verify`` and ``Admin.verify``: entries checked, corrupt ones removed,
    and one sentence per repair."""

    checked: int
    corrupt_removed: int
    implausible_removed: int
    """Entries whose audio cannot be their text (silent, far too short), removed."""
    repairs: list[str]
    available: bool


class StoreStats(TypedDict):
    """``AudioStore.stats``: the disk tier's size against its limits."""

    entries: int
    bytes: int
    size_limit: int
    effective_limit: int
    disk_full: bool


class StoreState(TypedDict):
    """``DiskHandle.status``: one store's health for ``/healthz``."""

    available: bool
    error: str | None
    dir: str | None


class VoiceInfo(TypedDict):
    """One voice as listed (``Voices.list``): a preset has a name and a kind only; a
    saved voice its recording's facts (the transcript for callers who may read it,
    ``has_prompt_text`` for the others)."""

    name: str
    kind: str
    prompt_text: NotRequired[str]
    has_prompt_text: NotRequired[bool]
    seconds: NotRequired[float]
    fingerprint: NotRequired[str]
    created: NotRequired[float]
    consent: NotRequired[str | None]


class VoiceRecord(TypedDict):
    """A saved voice as it is stored: the value of ``voice:<name>`` in the voice library's
    store (:mod:`lib.voices.library`) and, sealed, of ``v:<name>`` in the shared tier
    (:func:`lib.shared.codec.encode_voice`). Read back, a record is checked only as far
    as :func:`lib.shared.codec.decode_voice` goes, so its readers use ``get`` with defaults."""

    flac: bytes
    """The canonical prompt (16 kHz mono) as FLAC."""
    prompt_text: str
    created: float
    """Unix time of the save (the newest copy wins between tiers)."""
    fingerprint: str
    """md5 of the prompt's canonical PCM."""
    consent: NotRequired[dict[str, object]]
    """A copy of the consent record the voice was made under (:mod:`lib.voices.consents`),
    as it was then (loosely typed: :class:`lib.voices.library.SavedVoice` keeps it as a mapping)."""


class ProbeResult(TypedDict):
    """What the engine watchdog's probe synthesis found (:func:`lib.engines.probe.probe`), as
    :class:`lib.engines.watchdog.Watchdog` keeps it and ``/healthz`` shows it (``engine_state.probe``)."""

    ok: bool
    result: str
    """``ok``, ``failed`` or ``timed out``; ``skipped`` (no preset voice to probe with) or
    ``not run`` (shutting down, or a call is stuck)."""
    error: str | None
    """Why, with the language that failed (None: it succeeded)."""
    seconds: NotRequired[float]
    """How long the probe took (a probe that ran)."""
    at: NotRequired[float]
    """Unix time it ended (a probe that ran)."""
    superseded: NotRequired[bool]
    """A call succeeded since: a failed probe no longer makes the engine failing."""


class EngineHealth(TypedDict):
    """``Watchdog.health``: the engine's state for ``/healthz`` (``engine_state``)."""

    state: Literal["ok", "stuck", "failing"]
    reason: str | None
    """Why it is not ok (None when it is)."""
    calls_in_flight: int
    timeouts: int
    """Calls past their deadline since the start."""
    failures_in_a_row: int
    probe: ProbeResult | None
    """The last probe (None: none ran yet)."""


class CacheHealth(TypedDict):
    """The audio store as ``/healthz`` sums it up (``cache``)."""

    available: bool
    dir: str
    """The cache directory."""
    error: str | None


class TierUp(TypedDict):
    """A shared tier in ``/healthz``: its breaker's state only (a health check never waits on it)."""

    up: bool


class HealthReport(TypedDict):
    """``Dashboard.health``: the answer of ``/healthz``, "degraded" with one reason per
    problem; :meth:`lib.engines.watchdog.Watchdog.annotate` adds the engine's state."""

    status: Literal["ok", "degraded"]
    reasons: list[str]
    engine: str
    base: str
    """The base voice that speaks (the built-in engine: ``kokoro`` or ``espeak``, which it
    falls back to when Kokoro cannot run); "" for other engines."""
    model_version: str
    cache: CacheHealth
    stores: dict[str, StoreState]
    """Every local store by name (``audio``, ``voices``..., ``results``)."""
    shared: TierUp | None
    """None: no shared tier configured."""
    objects: TierUp | None
    """None: no object store configured."""
    engine_state: NotRequired[EngineHealth]
    """With a watchdog (always, in a service)."""


class Gauges(StoreStats):
    """``Dashboard.gauges``: what the Prometheus gauges read at each scrape (:mod:`lib.core.metrics`):
    the disk tier's stats and these."""

    memory_bytes: int
    engine_seconds_saved_last_hour: float
    shared_up: int
    """1 when the shared tier is reachable, else 0 (also when there is none)."""
    objects_up: int
    """1 when the object store is reachable, else 0 (also when there is none)."""


class LexiconChange(TypedDict):
    """One lexicon entry added, replaced or deleted (``lib.readings.journal.Change.to_json``):
    in the dashboard's ``lexicon`` and in the journal file."""

    term: str
    voice: str | None
    """The voice it is scoped to (None: global)."""
    before: str | None
    """The reading before (None: there was no entry)."""
    after: str | None
    """The reading after (None: the entry was deleted)."""
    at: float
    origin: str
    """``here``, ``replica`` (another replica's edit, through Redis) or ``start`` (found at the start)."""
    stale: int | None
    """Cached entries it made stale (None: not counted yet, or texts not stored)."""
    action: Literal["added", "replaced", "deleted"]


class LexiconStatus(TypedDict):
    """``Readings.status``: the operator's lexicon in the dashboard (``lexicon``)."""

    entries: int
    limit: int
    """``readings.max_entries``."""
    version: str
    frontend_version: str
    shared: bool
    """Whether it is shared through Redis."""
    last_change: LexiconChange | None
    recent_changes: list[LexiconChange]
    """The last ten, newest first."""


class ConsentRecord(TypedDict):
    """One consent to clone a voice, as :class:`lib.voices.consents.ConsentBook` stores
    (``consent:<id>``) and returns it; the OpenAI ``/v1/audio/voice_consents`` show it."""

    id: str
    """``cons_`` and 24 hexadecimal digits."""
    name: str
    """The label the uploader gave (normally the speaker's name)."""
    language: str
    """BCP 47 tag of the consent phrase."""
    created_at: int
    """Unix time, whole seconds."""
    fingerprint: str
    """md5 of the consent recording's canonical PCM (the recording is not kept)."""
    seconds: float
    """The recording's length, to 0.01 s."""
    recorded_by: dict[str, object]
    """Who sent it, as the HTTP layer describes the caller (``address``, ``admin``, ``origin``)."""
