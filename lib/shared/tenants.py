"""Tenants' keys and counters in the shared tier (Redis), as
:class:`lib.shared.tier.SharedTier` offers them (it inherits :class:`TenantKeys`), so that
a key made on one replica works on every replica, a revoked one on none, and limits
count every replica's requests. None of these keys is under the audio prefix (``clear``
and ``evict`` of the results leave them)::

    <namespace>tenants              hash: name -> the tenant's record (JSON, the key's hash)
    <namespace>tenants:hash         hash: key hash -> name
    <namespace>tenants:gcra:<counter>:<period> when the counter's bucket is empty (a script, expires)
    <namespace>tenants:busy:<counter>         sorted set: slot token -> expiry time
    <namespace>tenants:usage:<name>           hash: usage field -> total

Every method answers None when Redis cannot (the breaker is open or the call failed):
the caller then counts locally (see :class:`lib.tenants.Tenants`).
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import redis

from lib.cache.signing import Signer
from lib.shared.breaker import Breaker
from lib.shared.codec import as_bytes, as_text

__all__ = ["TenantKeys"]

#: Add ARGV[2] to a bucket of ARGV[3] that empties evenly over ARGV[1] seconds (GCRA, on
#: Redis's clock so that every replica counts alike) unless that overfills it:
#: {charged, seconds of the bucket full afterwards, seconds until the amount fits}.
_CHARGE = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local period = tonumber(ARGV[1])
local after_step = tonumber(ARGV[2]) * period / tonumber(ARGV[3])
local due = tonumber(redis.call('GET', KEYS[1]) or '0')
if due < now then due = now end
local after = due + after_step
if after - now > period + 0.000001 then
  return {0, string.format('%.6f', due - now), string.format('%.6f', after - period - now)}
end
redis.call('SET', KEYS[1], string.format('%.6f', after), 'PX', math.ceil((after - now) * 1000) + 1000)
return {1, string.format('%.6f', after - now), '0'}
"""
#: Take a slot unless every live one is taken: 1 taken, 0 refused.
_ACQUIRE = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[2]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[3], ARGV[4])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""


class TenantKeys:
    """The tenants half of the shared tier (see the module)."""

    client: redis.Redis
    breaker: Breaker
    namespace: str
    signer: Signer
    _scripts: dict[str, Any]

    def _check(self, kind: str, name: str, value: bytes) -> bytes | None:
        raise NotImplementedError  # the tier checks the tag, counts and logs a refusal

    def _script(self, name: str, body: str) -> Any:
        scripts = self.__dict__.setdefault("_scripts", {})
        if name not in scripts:
            scripts[name] = self.client.register_script(body)
        return scripts[name]

    def tenants_put(self, name: str, record: str, key_hash: str) -> bool | None:
        table, by_hash = self.namespace + "tenants", self.namespace + "tenants:hash"

        signed = self.signer.sign("tenant", name, record.encode("utf-8"))

        def put() -> bool:
            if not self.client.hsetnx(table, name, signed):
                return False
            self.client.hset(by_hash, key_hash, name)
            return True

        return self.breaker.call("tenants_put", put, None)

    def tenants_delete(self, name: str) -> bool | None:
        table, by_hash = self.namespace + "tenants", self.namespace + "tenants:hash"

        def delete() -> bool:
            record = self.client.hget(table, name)
            if record is None:
                return False
            opened = self._check("tenant", name, as_bytes(record))
            key_hash = json.loads(opened).get("key_hash", "") if opened is not None else ""
            pipe = self.client.pipeline(transaction=True)
            pipe.hdel(table, name)
            pipe.hdel(by_hash, key_hash)
            pipe.execute()
            return True

        return self.breaker.call("tenants_delete", delete, None)

    def tenants_all(self) -> dict[str, str] | None:
        """Every tenant's record (one without a valid tag, with ``cache.secret``, is left out)."""
        found = self.breaker.call("tenants_all", lambda: self.client.hgetall(self.namespace + "tenants"), None)
        if found is None:
            return None
        records = {}
        for field, value in found.items():
            opened = self._check("tenant", as_text(field), as_bytes(value))
            if opened is not None:
                records[as_text(field)] = as_text(opened)
        return records

    def tenants_find(self, key_hash: str) -> str | None:
        """The record of the key whose hash is ``key_hash``; "" for none."""
        table, by_hash = self.namespace + "tenants", self.namespace + "tenants:hash"

        def find() -> str:
            name = self.client.hget(by_hash, key_hash)
            if name is None:
                return ""
            record = self.client.hget(table, name)
            if record is None:
                return ""
            # With cache.secret a record is tagged with its name, and names the key's hash:
            # a forged record, or a hash pointed at another tenant's name, finds nobody.
            opened = self._check("tenant", as_text(name), as_bytes(record))
            if opened is None or json.loads(opened).get("key_hash") != key_hash:
                return ""
            return as_text(opened)

        return self.breaker.call("tenants_find", find, None)

    def tenants_charge(self, counter: str, seconds: int, amount: int, limit: int) -> tuple[bool, float, float] | None:
        key = f"{self.namespace}tenants:gcra:{counter}:{seconds}"

        def charge() -> tuple[bool, float, float]:
            done, level, wait = self._script("charge", _CHARGE)(keys=[key], args=[seconds, amount, limit])
            return bool(int(done)), float(as_text(level)), float(as_text(wait))

        return self.breaker.call("tenants_charge", charge, None)

    def tenants_acquire(self, counter: str, limit: int, lease: float) -> str | None:
        """A slot's token, "" when every slot is taken."""
        key = f"{self.namespace}tenants:busy:{counter}"
        token = uuid.uuid4().hex

        def acquire() -> str:
            now = time.time()
            taken = self._script("acquire", _ACQUIRE)(keys=[key], args=[now, limit, now + lease, token, int(lease) + 5])
            return token if int(taken) else ""

        return self.breaker.call("tenants_acquire", acquire, None)

    def tenants_release(self, counter: str, token: str) -> None:
        key = f"{self.namespace}tenants:busy:{counter}"
        self.breaker.call("tenants_release", lambda: self.client.zrem(key, token), None)

    def tenants_add_usage(self, name: str, fields: dict[str, float]) -> bool | None:
        key = f"{self.namespace}tenants:usage:{name}"

        def add() -> bool:
            pipe = self.client.pipeline(transaction=False)
            for field, value in fields.items():
                pipe.hincrbyfloat(key, field, value)
            pipe.execute()
            return True

        return self.breaker.call("tenants_add_usage", add, None)

    def tenants_usage(self) -> dict[str, dict[str, float]] | None:
        prefix = f"{self.namespace}tenants:usage:"

        def read() -> dict[str, dict[str, float]]:
            names = [as_text(k) for k in self.client.scan_iter(match=prefix + "*", count=500)]
            pipe = self.client.pipeline(transaction=False)
            for name in names:
                pipe.hgetall(name)
            rows: dict[str, dict[str, float]] = {}
            for name, row in zip(names, pipe.execute(), strict=True):
                rows[name[len(prefix) :]] = {as_text(k): float(as_text(v)) for k, v in row.items()}
            return rows

        return self.breaker.call("tenants_usage", read, None)
