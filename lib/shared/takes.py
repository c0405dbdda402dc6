"""Approved takes in the shared tier (Redis), as :class:`lib.shared.tier.SharedTier`
offers them (it inherits :class:`TakeKeys`).

Three keys, none under the audio prefix (so neither ``clear`` nor ``evict`` of the
results touches them)::

    <namespace>takes        hash: phrase id -> the approval record (JSON)
    <namespace>takes:audio  hash: cache key -> the approved take's packed entry
    <namespace>takes:rev    the approvals' revision, bumped by every change (replicas poll it)

Each change is one MULTI/EXEC, so a replica that sees the new revision reads the
record and its audio together.
"""

from __future__ import annotations

from typing import Any

import redis

from lib.cache.signing import Signer
from lib.shared.breaker import Breaker
from lib.shared.codec import as_bytes, as_text, read_versioned

__all__ = ["TakeKeys"]


class TakeKeys:
    """The approvals half of the shared tier. Every method answers None when Redis
    cannot (the breaker is open or the call failed)."""

    client: redis.Redis
    breaker: Breaker
    namespace: str
    signer: Signer

    def _check(self, kind: str, name: str, value: bytes) -> bytes | None:
        raise NotImplementedError  # the tier checks the tag, counts and logs a refusal

    @property
    def _takes(self) -> tuple[str, str, str]:
        ns = self.namespace
        return ns + "takes", ns + "takes:audio", ns + "takes:rev"

    def takes_rev(self) -> int | None:
        """The approvals' revision (0: nothing approved through Redis yet)."""
        down = object()
        value: Any = self.breaker.call("takes_rev", lambda: self.client.get(self._takes[2]), down)
        if value is down:
            return None
        return int(as_text(value)) if value is not None else 0

    def takes_state(self) -> tuple[int, dict[str, str]] | None:
        """``(revision, {phrase: record JSON})`` read together."""
        table, _, rev = self._takes
        found = read_versioned(self.client, self.breaker, "takes_state", table, rev)
        if found is None:
            return None
        revision, records = found
        state: dict[str, str] = {}
        for field, record in records.items():
            phrase = as_text(field)
            opened = self._check("take", phrase, as_bytes(record))  # a record without its tag is not adopted
            if opened is not None:
                state[phrase] = as_text(opened)
        return revision, state

    def takes_put(self, phrase: str, record: str, key: str, blob: bytes, old_key: str | None = None) -> int | None:
        """Make ``record`` (whose take is ``key``, packed as ``blob``) the phrase's
        approval, dropping ``old_key``'s audio; the new revision."""
        table, audio, rev = self._takes
        signed = self.signer.sign("take", phrase, record.encode("utf-8"))
        blob = self.signer.sign("take-audio", key, blob)

        def put() -> Any:
            pipe = self.client.pipeline(transaction=True)
            pipe.hset(table, phrase, signed)
            if old_key is not None and old_key != key:
                pipe.hdel(audio, old_key)
            pipe.hset(audio, key, blob)
            pipe.incr(rev)
            return pipe.execute()[-1]

        done = self.breaker.call("takes_put", put, None)
        return None if done is None else int(done)

    def takes_delete(self, phrases: dict[str, str]) -> int | None:
        """Withdraw the approvals of ``phrases`` (phrase -> its take's key); the new revision."""
        table, audio, rev = self._takes

        def delete() -> Any:
            pipe = self.client.pipeline(transaction=True)
            if phrases:
                pipe.hdel(table, *phrases)
                pipe.hdel(audio, *phrases.values())
            pipe.incr(rev)
            return pipe.execute()[-1]

        done = self.breaker.call("takes_delete", delete, None)
        return None if done is None else int(done)

    def takes_audio(self, key: str) -> bytes | None:
        """The packed entry of an approved take, or None."""
        value = self.breaker.call("takes_audio", lambda: self.client.hget(self._takes[1], key), None)
        return None if value is None else self._check("take-audio", key, as_bytes(value))
