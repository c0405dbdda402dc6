"""The shapes of results that cross module boundaries: what the admin actions, the
stores and the voice library report to the front ends (the HTTP API answers them as JSON,
the UI turns them into sentences). Typed dictionaries: they are plain dictionaries at run
time, so they serialise as they are; the type checker holds every producer and reader
to one shape.
"""

from __future__ import annotations

from typing import NotRequired  # pydantic reads these on Python 3.11

from typing_extensions import TypedDict

__all__ = [
    "ClearReport",
    "EvictReport",
    "StoreState",
    "StoreStats",
    "SweepReport",
    "VerifyReport",
    "VoiceInfo",
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
