"""Tenants' section of the configuration (``tenants:``): the limits of callers without an
API key (each client address on its own), and the limits a new key gets when its
``POST /api/keys`` names none. Re-exported by :mod:`lib.config`; :mod:`lib.tenants`
enforces it.

Every limit is an integer or null (no limit). ``synth_chars_per_hour`` counts the
characters sent to the engine (misses, takes, conversions); a hit never counts and is
never refused by it, so 0 means "cached phrases only". ``requests_per_minute`` counts
every synthesis request, hits included. ``concurrent_misses`` is how many of a caller's
misses may be made at once (0: hits only too).

The defaults keep a 2-core machine answering its other callers: on the Kokoro base a
character costs about 0.06 CPU-s, so an anonymous address may use about a sixth of the
machine's hour (20,000 characters, one miss at a time), and a key three times that.
"""

from __future__ import annotations

from dataclasses import dataclass

from lib.config.load import require

__all__ = ["LIMIT_NAMES", "TenantsConfig"]

#: The three limits, as ``POST /api/keys`` and the usage table name them.
LIMIT_NAMES = ("synth_chars_per_hour", "requests_per_minute", "concurrent_misses")


@dataclass(frozen=True)
class TenantsConfig:
    """Limits of anonymous callers and the default limits of new API keys (``tenants:``)."""

    anonymous_synth_chars_per_hour: int | None = 20_000
    """Characters an address without a key may send to the engine per hour (0: hits only)."""
    anonymous_requests_per_minute: int | None = 120
    """Synthesis requests (hits too) an address without a key may send per minute."""
    anonymous_concurrent_misses: int | None = 1
    """Misses of one address without a key made at once."""
    synth_chars_per_hour: int | None = 60_000
    """A new key's character budget per hour, when ``POST /api/keys`` gives none."""
    requests_per_minute: int | None = 600
    """A new key's requests per minute, when ``POST /api/keys`` gives none."""
    concurrent_misses: int | None = 2
    """A new key's misses at once, when ``POST /api/keys`` gives none."""
    max_keys: int = 1000
    """Keys that may exist at once (each is a label of the per-tenant metrics)."""

    def __post_init__(self) -> None:
        for prefix in ("anonymous_", ""):
            for name in LIMIT_NAMES:
                value = getattr(self, prefix + name)
                require(
                    (
                        value is None or (isinstance(value, int) and 0 <= value <= 10**12),
                        f"tenants.{prefix}{name}: must be a whole number from 0 or null (no limit), got {value!r}",
                    )
                )
        require((1 <= self.max_keys <= 100_000, f"tenants.max_keys: must be 1-100000, got {self.max_keys}"))
