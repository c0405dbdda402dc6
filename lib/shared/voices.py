"""Saved voices and voice profiles in the shared tier (Redis), as
:class:`lib.shared.tier.SharedTier` offers them (it inherits :class:`VoiceKeys`).

Redis is the authority for saved voices while it answers: each replica's local copy of
a voice is checked against it (:meth:`VoiceKeys.voice_state`), and a deletion leaves a
tombstone (``<namespace>voices:deleted``: name -> unix time), so a voice deleted on one
replica is not brought back by another's local copy; the library decides by creation
times (newest wins, :mod:`lib.voices.library`).
"""

from __future__ import annotations

import time
from typing import Any

import redis

from lib.cache.signing import Signer
from lib.core.reports import VoiceRecord
from lib.shared.breaker import Breaker
from lib.shared.codec import (
    PROFILE_MAGIC,
    CorruptValueError,
    as_bytes,
    as_text,
    decode_voice,
    encode_voice,
    seal,
    unseal,
)

__all__ = ["VoiceKeys"]


class VoiceKeys:
    """The voice half of the shared tier: ``p:<profile key>``, ``v:<name>``, the
    ``voices`` set of names and the tombstones."""

    client: redis.Redis
    breaker: Breaker
    namespace: str
    signer: Signer

    def _check(self, kind: str, name: str, value: bytes) -> bytes | None:
        raise NotImplementedError  # the tier checks the tag, counts and logs a refusal

    def _corrupt(self, what: str, name: str, exc: BaseException) -> None:
        raise NotImplementedError  # the tier deletes and counts

    def _unlink_prefix(self, prefix: str) -> int:
        raise NotImplementedError

    def get_profile(self, key: str) -> bytes | None:
        name = self.namespace + "p:" + key
        value = self.breaker.call("get_profile", lambda: self.client.get(name), None)
        opened = None if value is None else self._check("profile", key, as_bytes(value))
        if opened is None:
            return None
        try:
            return unseal(PROFILE_MAGIC, opened)
        except CorruptValueError as exc:
            self._corrupt("voice profile", name, exc)
            return None

    def put_profile(self, key: str, blob: bytes) -> bool:
        name, value = self.namespace + "p:" + key, self.signer.sign("profile", key, seal(PROFILE_MAGIC, blob))
        return bool(self.breaker.call("put_profile", lambda: bool(self.client.set(name, value)), False))

    def clear_profiles(self) -> int:
        """Delete every voice profile in our namespace (derived data; saved voices stay)."""
        return int(self.breaker.call("clear_profiles", lambda: self._unlink_prefix(self.namespace + "p:"), 0))

    def voice_state(self, name: str) -> tuple[VoiceRecord | None, float | None] | None:
        """``(record, deleted_at)`` as Redis knows them (the saved voice or None, and the
        time of its last deletion or None); None when Redis cannot answer."""
        key = self.namespace + "v:" + name

        def read() -> tuple[Any, Any]:
            pipe = self.client.pipeline(transaction=False)
            pipe.get(key)
            pipe.hget(self._tombstones, name)
            value, deleted = pipe.execute()
            return value, deleted

        found = self.breaker.call("voice_state", read, None)
        if found is None:
            return None
        value, deleted = found
        deleted_at = float(deleted) if deleted is not None else None
        opened = None if value is None else self._check("voice", name, as_bytes(value))
        if opened is None:
            return None, deleted_at
        try:
            return decode_voice(name, opened), deleted_at
        except CorruptValueError as exc:
            self._corrupt("saved voice", key, exc)
            return None, deleted_at

    def get_voice(self, name: str) -> VoiceRecord | None:
        key = self.namespace + "v:" + name
        value = self.breaker.call("get_voice", lambda: self.client.get(key), None)
        opened = None if value is None else self._check("voice", name, as_bytes(value))
        if opened is None:
            return None
        try:
            return decode_voice(name, opened)
        except CorruptValueError as exc:
            self._corrupt("saved voice", key, exc)
            return None

    def put_voice(self, name: str, record: VoiceRecord) -> bool:
        value = self.signer.sign("voice", name, encode_voice(name, record))

        def write() -> bool:
            pipe = self.client.pipeline(transaction=True)
            pipe.set(self.namespace + "v:" + name, value)
            pipe.sadd(self.namespace + "voices", name)
            pipe.hdel(self._tombstones, name)
            pipe.execute()
            return True

        return bool(self.breaker.call("put_voice", write, False))

    def delete_voice(self, name: str, at: float | None = None) -> bool | None:
        """Delete ``name`` and leave a tombstone (so that no replica's local copy brings
        it back); whether it was there, or None when Redis cannot be reached."""
        when = time.time() if at is None else at

        def remove() -> bool:
            pipe = self.client.pipeline(transaction=True)
            pipe.unlink(self.namespace + "v:" + name)
            pipe.srem(self.namespace + "voices", name)
            pipe.hset(self._tombstones, name, repr(when))
            removed, _, _ = pipe.execute()
            return bool(removed)

        done = self.breaker.call("delete_voice", remove, None)
        return None if done is None else bool(done)

    def voice_names(self) -> list[str]:
        return self.voice_index() or []

    def voice_index(self) -> list[str] | None:
        """The names of the saved voices, or None when Redis cannot be reached."""
        names = self.breaker.call("voice_names", lambda: set(self.client.smembers(self.namespace + "voices")), None)
        return None if names is None else sorted(as_text(n) for n in names)

    @property
    def _tombstones(self) -> str:
        return self.namespace + "voices:deleted"
