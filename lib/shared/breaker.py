"""The circuit breaker around the Redis client (:class:`lib.cache.breaker.Breaker`, with
Redis's faults sorted): a fault never fails a request.

Connection faults and time-outs open the breaker. A command error (``ResponseError``:
out of memory under ``noeviction``, a wrong type from a foreign key) is counted and
logged, rate-limited per cause, but does not open it: the connection is healthy and
other commands still work. Every other error class is contained too: a client whose
socket was closed under it can raise ``ValueError`` ("I/O operation on closed file")
or others; they open the breaker like a connection fault, and never reach a request.
Opening the breaker never closes a socket another thread is using: the tier's
``on_trip`` drops only idle pooled connections.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import redis

from lib.cache.breaker import Breaker as _Breaker

__all__ = ["Breaker"]

_LOGGER = logging.getLogger(__name__)

#: Faults that mean "Redis is not reachable in time": they open the breaker.
_TRIPPING = (redis.ConnectionError, redis.TimeoutError, OSError)


def _trips(exc: BaseException) -> bool:
    return isinstance(exc, _TRIPPING) or not isinstance(exc, redis.RedisError)


class Breaker(_Breaker):
    """Guards calls to one Redis server. Thread-safe."""

    def __init__(
        self,
        where: str,
        on_error: Callable[[], None],
        *,
        on_trip: Callable[[], None] = lambda: None,
        first_backoff: float = 0.25,
        max_backoff: float = 5.0,
    ) -> None:
        super().__init__(
            where, on_error, on_trip=on_trip, first_backoff=first_backoff, max_backoff=max_backoff,
            what="shared tier", fallback="serving from local tiers and local single-flight", trips=_trips,
        )  # fmt: skip
