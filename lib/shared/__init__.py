"""The shared (Redis) tier for several replicas behind a load balancer.

Results, saved voices, voice profiles and the single-flight lock are shared through
one Redis; each replica keeps its own memory and disk tiers in front of it. Enabled by
``cache.shared_url`` (``TTS_CACHE_SHARED_URL``, ``--shared-url``). ``redis`` is imported
only when a module of this package is, i.e. only when a shared tier is configured:
importing ``lib.shared`` itself imports nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["Breaker", "CorruptValueError", "RedisLeases", "SharedLeases", "SharedTier"]

if TYPE_CHECKING:
    from lib.shared.breaker import Breaker
    from lib.shared.codec import CorruptValueError
    from lib.shared.leases import RedisLeases, SharedLeases
    from lib.shared.tier import SharedTier

_WHERE = {
    "Breaker": "lib.shared.breaker",
    "CorruptValueError": "lib.shared.codec",
    "RedisLeases": "lib.shared.leases",
    "SharedLeases": "lib.shared.leases",
    "SharedTier": "lib.shared.tier",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(name)
