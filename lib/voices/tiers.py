"""Reading a value from the local voice store, then the shared tier, and the shared
tier's voice operations as the voice modules see them."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

from lib.cache.handle import DiskHandle
from lib.core.reports import VoiceRecord

__all__ = ["SharedVoices", "read_tiers"]

_LOGGER = logging.getLogger(__name__)


class SharedVoices(Protocol):
    """What voices need of the shared (Redis) tier (``lib.shared.SharedTier``)."""

    def get_profile(self, key: str) -> bytes | None: ...

    def put_profile(self, key: str, blob: bytes) -> bool: ...

    def clear_profiles(self) -> int: ...

    def voice_state(self, name: str) -> tuple[VoiceRecord | None, float | None] | None:
        """(record, deleted_at), or None when the shared tier cannot answer."""
        ...

    def put_voice(self, name: str, record: VoiceRecord) -> bool: ...

    def delete_voice(self, name: str, at: float | None = None) -> bool | None:
        """Whether it was there; None when the shared tier cannot be reached."""
        ...

    def voice_index(self) -> list[str] | None:
        """The saved names, or None when the shared tier cannot answer."""
        ...


def read_tiers(
    store: DiskHandle | None, local_key: str, shared_get: Callable[[str], Any] | None, shared_key: str
) -> Any:
    """The value from the local store, else from the shared tier; None if neither has it.
    A failing local store is reported by its handle and skipped, never raised."""
    value = None
    if store is not None:
        with store.using("get") as cache:
            value = cache.get(local_key) if cache is not None else None
    if value is None and shared_get is not None:
        value = shared_get(shared_key)
    return value
