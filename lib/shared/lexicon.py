"""The operator's pronunciation lexicon in the shared tier (Redis), as
:class:`lib.shared.tier.SharedTier` offers it (it inherits :class:`LexiconKeys`).

Two keys: ``<namespace>lexicon``, a hash of entries (field: the JSON ``[term, voice]``,
value: the reading), and ``<namespace>lexicon:rev``, a counter bumped by every change
in the same script, which each replica polls (one GET a second) to notice another's
edit. Every edit is one Lua script, so two replicas editing at once both land and the
size limit holds across them. Redis is the authority while it answers: a replica that
starts adopts Redis's lexicon (:mod:`lib.readings.sync`); the first one to find none
publishes its file's.
"""

from __future__ import annotations

import json
from typing import Any

import redis

from lib.shared.breaker import Breaker
from lib.shared.codec import as_text, read_versioned

__all__ = ["LexiconKeys", "entry_field"]

# KEYS[1] = the hash, KEYS[2] = the revision. -2: nothing published yet (publish first).
_PUT = """
if redis.call('EXISTS', KEYS[2]) == 0 then return -2 end
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 and redis.call('HLEN', KEYS[1]) >= tonumber(ARGV[3]) then
  return -1
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
return redis.call('INCR', KEYS[2])
"""
_DELETE = """
if redis.call('EXISTS', KEYS[2]) == 0 then return -2 end
if redis.call('HDEL', KEYS[1], ARGV[1]) == 0 then return 0 end
return redis.call('INCR', KEYS[2])
"""
_PUBLISH = """
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
for i = 1, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
redis.call('SET', KEYS[2], 1)
return 1
"""


def entry_field(term: str, voice: str | None) -> str:
    """The hash field of an entry: its term and scope."""
    return json.dumps([term, voice], ensure_ascii=False)


class LexiconKeys:
    """The lexicon half of the shared tier. Every method answers None when Redis
    cannot (the breaker is open or the call failed)."""

    client: redis.Redis
    breaker: Breaker
    namespace: str

    @property
    def _lexicon(self) -> tuple[str, str]:
        return self.namespace + "lexicon", self.namespace + "lexicon:rev"

    def lexicon_rev(self) -> int | None:
        """The lexicon's revision (0: none published yet)."""
        down = object()
        value: Any = self.breaker.call("lexicon_rev", lambda: self.client.get(self._lexicon[1]), down)
        if value is down:
            return None
        return int(as_text(value)) if value is not None else 0

    def lexicon_state(self) -> tuple[int, list[tuple[str, str | None, str]]] | None:
        """``(revision, [(term, voice, reading)])`` read together (0 and []: none published)."""
        table, rev = self._lexicon
        found = read_versioned(self.client, self.breaker, "lexicon_state", table, rev)
        if found is None:
            return None
        revision, fields = found
        entries: list[tuple[str, str | None, str]] = []
        for field, reading in fields.items():
            try:
                term, voice = json.loads(as_text(field))
                entries.append((str(term), None if voice is None else str(voice), as_text(reading)))
            except (ValueError, TypeError):
                continue  # not ours: the reader validates what it keeps
        return revision, entries

    def lexicon_publish(self, entries: list[tuple[str, str | None, str]]) -> bool | None:
        """Publish ``entries`` as the lexicon unless one is published; whether this did."""
        table, rev = self._lexicon
        args: list[str] = []
        for term, voice, reading in entries:
            args += [entry_field(term, voice), reading]
        done = self.breaker.call("lexicon_publish", lambda: self.client.eval(_PUBLISH, 2, table, rev, *args), None)
        return None if done is None else bool(done)

    def lexicon_put(self, term: str, voice: str | None, reading: str, limit: int) -> int | None:
        """Add or replace an entry: the new revision, -1 if the lexicon is full, -2 if
        none is published yet."""
        table, rev = self._lexicon
        field = entry_field(term, voice)
        done = self.breaker.call(
            "lexicon_put", lambda: self.client.eval(_PUT, 2, table, rev, field, reading, str(limit)), None
        )
        return None if done is None else int(done)

    def lexicon_delete(self, term: str, voice: str | None) -> int | None:
        """Delete an entry: the new revision, 0 if there was none, -2 if no lexicon is
        published yet."""
        table, rev = self._lexicon
        field = entry_field(term, voice)
        done = self.breaker.call("lexicon_delete", lambda: self.client.eval(_DELETE, 2, table, rev, field), None)
        return None if done is None else int(done)
