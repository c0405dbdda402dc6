"""The shared (Redis) tier for several replicas behind a load balancer.

Results, saved voices, voice profiles and the single-flight lock are shared through
one Redis; each replica keeps its own memory and disk tiers in front of it. Enabled by
``cache.shared_url`` (``TTS_CACHE_SHARED_URL``, ``--shared-url``). ``redis`` is imported
only when this package is, i.e. only when a shared tier is configured.
"""

from __future__ import annotations

from lib.shared.breaker import Breaker
from lib.shared.codec import CorruptValueError
from lib.shared.leases import RedisLeases, SharedLeases
from lib.shared.report import status_markdown
from lib.shared.tier import SharedTier

__all__ = ["Breaker", "CorruptValueError", "RedisLeases", "SharedLeases", "SharedTier", "status_markdown"]
