"""The object-store tier (S3 API: MinIO, Ceph RGW, AWS S3) for results that outgrow one
machine and Redis's memory.

Enabled by ``cache.objects_url`` (``TTS_CACHE_OBJECTS_URL``, ``--objects-url``): an S3
endpoint whose first path segment is the bucket and the rest a key prefix. Credentials
and region come from ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY`` (and
``AWS_SESSION_TOKEN``), ``AWS_DEFAULT_REGION``. The roles:

- :mod:`lib.config.objects`: the URL, parsed and checked (no client involved);
- :mod:`lib.objects.sigv4` and :mod:`lib.objects.client`: a small S3 client (Signature
  Version 4 over httpx) for the few calls the tier makes;
- :mod:`lib.objects.layout`: object names, and the tag and expiry indexes beside them;
- :mod:`lib.objects.tier`: the tier (``lib.cache.tiers.SharedStore``) behind a breaker;
- :mod:`lib.objects.leases`: cross-replica single-flight with create-only PUTs;
- :mod:`lib.objects.feed`: evictions announced to the other replicas (without Redis);
- :mod:`lib.objects.playable`: presigned URLs of playable copies (``cache.objects_redirect``).

Importing ``lib.objects`` itself imports nothing: the client is imported only when a
tier is configured (tests/test_architecture.py checks it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["ObjectTier", "configured_objects", "parse_objects_url"]

if TYPE_CHECKING:
    from collections.abc import Callable

    from lib.cache.signing import Signer
    from lib.config import CacheConfig
    from lib.config.objects import parse_objects_url
    from lib.objects.tier import ObjectTier

_WHERE = {"ObjectTier": "lib.objects.tier", "parse_objects_url": "lib.config.objects"}


def configured_objects(
    cache: CacheConfig, on_error: Callable[[], None], signer: Signer | None = None
) -> ObjectTier | None:
    """The tier ``cache.objects_url`` asks for, or None (and no client imported);
    ``signer`` tags and checks its entries (``cache.secret``)."""
    if not cache.objects_url:
        return None
    from lib.objects.tier import ObjectTier

    return ObjectTier(cache.objects_url, on_error=on_error, redirect=cache.objects_redirect, signer=signer)


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(name)
