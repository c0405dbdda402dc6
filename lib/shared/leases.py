"""Cross-replica single-flight leases in Redis, with a local fallback.

:class:`RedisLeases` is the plain protocol: ``SET key token NX PX lease`` takes the
lock with a random token; renewing and releasing run a Lua script that compares the
token first, so only the owner can extend or delete its lock (a holder whose lease
ran out cannot delete the next holder's). A replica that dies stops renewing, and its
lock is gone after at most one lease.

:class:`SharedLeases` is what the service uses: Redis leases while the shared tier is
up, the host's :class:`lib.cache.singleflight.DiskLeases` while it is down, so a request
never fails because Redis did. Tokens carry their origin (``r:`` or ``l:``) so that
renew and release go back to the store that granted them.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Any

import redis

from lib.cache.leases import Leases

if TYPE_CHECKING:
    from lib.shared.breaker import Breaker

__all__ = ["RedisLeases", "SharedLeases"]

# KEYS[1] = lock, ARGV[1] = token, ARGV[2] = lease in ms. 1 if ours (and extended), else 0.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

# KEYS[1] = lock, ARGV[1] = token. 1 if it was ours (and is now deleted), else 0.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

_FAULT: Any = object()  # a breaker's answer when Redis could not be asked


def _ms(seconds: float) -> int:
    return max(1, int(seconds * 1000))


class RedisLeases:
    """Expiring per-key locks in Redis under ``prefix``. Raises Redis errors."""

    def __init__(self, client: redis.Redis, prefix: str) -> None:
        self._client = client
        self._prefix = prefix
        # register_script runs EVALSHA and falls back to EVAL after a flush or a
        # restart emptied Redis's script cache.
        self._renew = client.register_script(_RENEW)
        self._release = client.register_script(_RELEASE)

    def acquire(self, key: str, lease: float) -> str | None:
        token = secrets.token_hex(16)
        taken = self._client.set(self._prefix + key, token, nx=True, px=_ms(lease))
        return token if taken else None

    def renew(self, key: str, token: str, lease: float) -> bool:
        return bool(self._renew(keys=[self._prefix + key], args=[token, _ms(lease)]))

    def release(self, key: str, token: str) -> bool:
        """True if the lock was ours and is released."""
        return bool(self._release(keys=[self._prefix + key], args=[token]))

    def held(self, key: str) -> bool:
        return bool(self._client.exists(self._prefix + key))

    def owner(self, key: str) -> str | None:
        """The token holding ``key`` now (for tests and diagnostics)."""
        value = self._client.get(self._prefix + key)
        if value is None:
            return None
        return value.decode("ascii", "replace") if isinstance(value, bytes) else str(value)


class SharedLeases:
    """:class:`RedisLeases` behind a breaker, falling back to ``local`` (or to
    in-process single-flight only when there is no local lock store)."""

    def __init__(self, remote: RedisLeases, breaker: Breaker, local: Leases | None) -> None:
        self.remote = remote
        self.local = local
        self._breaker = breaker

    def acquire(self, key: str, lease: float) -> str | None:
        token = self._breaker.call("lock", lambda: self.remote.acquire(key, lease), _FAULT)
        if token is not _FAULT:
            return None if token is None else "r:" + token
        if self.local is None:
            return "n:"  # no lock store at all: the in-process flight is the only guard
        local = self.local.acquire(key, lease)
        return None if local is None else "l:" + local

    def renew(self, key: str, token: str, lease: float) -> bool:
        origin, raw = token[:2], token[2:]
        if origin == "r:":
            # Unknown while Redis is unreachable: keep going, the fault is counted.
            return bool(self._breaker.call("lock", lambda: self.remote.renew(key, raw, lease), True))
        if origin == "l:" and self.local is not None:
            return self.local.renew(key, raw, lease)
        return True

    def release(self, key: str, token: str) -> None:
        origin, raw = token[:2], token[2:]
        if origin == "r:":
            # If Redis is unreachable the lock simply expires after its lease.
            self._breaker.call("lock", lambda: self.remote.release(key, raw), False)
        elif origin == "l:" and self.local is not None:
            self.local.release(key, raw)

    def held(self, key: str) -> bool:
        # Both stores: a holder that took the local lock while Redis was down may still
        # be running after Redis came back.
        if self.local is not None and self.local.held(key):
            return True
        return bool(self._breaker.call("lock", lambda: self.remote.held(key), False))
