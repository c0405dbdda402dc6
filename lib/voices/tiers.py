"""Reading a value from the local voice store, then the shared tier, and the shared
tier's voice operations as the voice modules see them."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, Protocol

import diskcache

__all__ = ["SharedVoices", "read_tiers"]

_LOGGER = logging.getLogger(__name__)


class SharedVoices(Protocol):
    """What voices need of the shared (Redis) tier (``lib.shared.SharedTier``)."""

    def get_profile(self, key: str) -> bytes | None: ...

    def put_profile(self, key: str, blob: bytes) -> bool: ...

    def get_voice(self, name: str) -> dict[str, Any] | None: ...

    def put_voice(self, name: str, record: dict[str, Any]) -> bool: ...

    def delete_voice(self, name: str) -> bool: ...

    def voice_names(self) -> list[str]: ...


def read_tiers(
    store: diskcache.Cache | None, local_key: str, shared_get: Callable[[str], Any] | None, shared_key: str
) -> Any:
    """The value from the local store, else from the shared tier; None if neither has it.
    A failing local store is logged and skipped, never raised."""
    value = None
    if store is not None:
        try:
            value = store.get(local_key)
        except Exception as exc:
            _LOGGER.warning("cannot read %s from the voice store: %s", local_key, exc)
    if value is None and shared_get is not None:
        value = shared_get(shared_key)
    return value
