"""Cross-replica single-flight without Redis: a lease is an object, taken with a
create-only PUT (``If-None-Match: *``), which AWS S3 and MinIO make atomic: of two
replicas missing the same key at once, exactly one creates ``<prefix>/l/<key>`` and runs
the engine; the other finds it taken and waits for the result.

The lease object holds the holder's random token and the lease time. Its expiry is
counted on the *store's* clock (its ``Last-Modified`` plus the lease, against the
``Date`` of the answer that read it), so replicas whose clocks disagree still agree on
it. The holder renews it every third of the lease (a PUT with ``If-Match`` on the ETag
it read, so a lease that was taken over is never overwritten); a replica that died
stops renewing and its lease is taken over (again with ``If-Match``: one taker wins)
once it has run out. Release reads the lease and deletes it if the token is still ours
(a delete cannot be made conditional on every store: between the read and the delete
only an *expired* lease can change hands, and a holder that let its lease expire has
lost it anyway).

While the store is unreachable the breaker answers at once and leases come from
``local`` (the host's lock store), as the Redis tier does; tokens carry their origin
(``o:`` or ``l:``) so that renew and release go back to the store that granted them.
"""

from __future__ import annotations

import json
import secrets
import time
from typing import Any

from lib.cache.breaker import Breaker
from lib.cache.leases import Leases
from lib.objects.client import Got, ObjectClient
from lib.objects.layout import Layout

__all__ = ["ObjectLeases"]

_FAULT: Any = object()  # the breaker's answer when the store could not be asked
_GRACE = 1.0  # Last-Modified has whole seconds


def _body(token: str, lease: float) -> bytes:
    return json.dumps({"token": token, "lease": lease}).encode()


def _read(got: Got) -> tuple[str, bool]:
    """(token, expired) of a lease object; a damaged one counts as expired."""
    try:
        data = json.loads(got.body)
        token, lease = str(data["token"]), float(data["lease"])
    except (ValueError, KeyError, TypeError):
        return "", True
    now = got.date if got.date is not None else time.time()
    if got.last_modified is None:
        return token, False
    return token, now > got.last_modified + lease + _GRACE


class ObjectLeases:
    """Leases as objects, behind the tier's breaker, falling back to ``local``."""

    def __init__(self, client: ObjectClient, layout: Layout, breaker: Breaker, local: Leases | None) -> None:
        self.client = client
        self.layout = layout
        self.local = local
        self._breaker = breaker

    # -- the protocol on the store (raises the client's errors) -----------------------------

    def take(self, key: str, lease: float) -> str | None:
        """A token if the lease was free or expired (now ours), else None."""
        name, token = self.layout.lease(key), secrets.token_hex(16)
        for _ in range(3):  # a lease deleted between our PUT and our read: try again
            if self.client.put(name, _body(token, lease), if_none_match=True) is not None:
                return token
            got = self.client.get(name)
            if got is None:
                continue
            _, expired = _read(got)
            if not expired:
                return None
            # Its holder died: take it over, unless another replica just did.
            return token if self.client.put(name, _body(token, lease), if_match=got.etag) is not None else None
        return None

    def extend(self, key: str, token: str, lease: float) -> bool:
        name = self.layout.lease(key)
        got = self.client.get(name)
        if got is None or _read(got)[0] != token:
            return False
        return self.client.put(name, _body(token, lease), if_match=got.etag) is not None

    def drop(self, key: str, token: str) -> bool:
        name = self.layout.lease(key)
        got = self.client.get(name)
        if got is None or _read(got)[0] != token:
            return False
        self.client.delete(name)
        return True

    def holder(self, key: str) -> str | None:
        """The token holding ``key`` now, unless expired (tests and diagnostics)."""
        got = self.client.get(self.layout.lease(key))
        if got is None:
            return None
        token, expired = _read(got)
        return None if expired else token

    # -- lib.cache.leases.Leases ------------------------------------------------------------

    def acquire(self, key: str, lease: float) -> str | None:
        token = self._breaker.call("lock", lambda: self.take(key, lease), _FAULT)
        if token is not _FAULT:
            return None if token is None else "o:" + token
        if self.local is None:
            return "n:"  # no lock store at all: the in-process flight is the only guard
        local = self.local.acquire(key, lease)
        return None if local is None else "l:" + local

    def renew(self, key: str, token: str, lease: float) -> bool:
        origin, raw = token[:2], token[2:]
        if origin == "o:":
            # Unknown while the store is unreachable: keep going, the fault is counted.
            return bool(self._breaker.call("lock", lambda: self.extend(key, raw, lease), True))
        if origin == "l:" and self.local is not None:
            return self.local.renew(key, raw, lease)
        return True

    def release(self, key: str, token: str) -> None:
        origin, raw = token[:2], token[2:]
        if origin == "o:":
            # If the store is unreachable the lease simply expires.
            self._breaker.call("unlock", lambda: self.drop(key, raw), False)
        elif origin == "l:" and self.local is not None:
            self.local.release(key, raw)

    def held(self, key: str) -> bool:
        # Both stores: a holder that took the local lock while the store was down may
        # still be running after it came back.
        if self.local is not None and self.local.held(key):
            return True
        return bool(self._breaker.call("lock", lambda: self.holder(key) is not None, False))
