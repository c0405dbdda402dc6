"""``cache.objects_url``: an S3 endpoint URL whose first path segment is the bucket and
the rest a key prefix, e.g. ``http://minio.internal:9000/tts-cache/prod``.

Path-style addressing (``endpoint/bucket/key``) works with MinIO, Ceph RGW and AWS S3
alike (``https://s3.eu-west-1.amazonaws.com/my-bucket/tts``). Credentials never go in
the URL: they come from the standard ``AWS_*`` variables, so that the URL can be logged
and shown on the dashboard as it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from lib.errors import ConfigError

__all__ = ["ObjectsURL", "parse_objects_url"]

# S3's rules for bucket names (3-63 chars, lower case, digits, dots and hyphens).
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
# A prefix of plain characters, so that object names need no escaping anywhere (URLs,
# signatures, listings) and cannot be read two ways.
_PREFIX_RE = re.compile(r"^[A-Za-z0-9._-]+(?:/[A-Za-z0-9._-]+)*$")
_KEY = "cache.objects_url"
_EXAMPLE = "http://minio.internal:9000/tts-cache/prod"


@dataclass(frozen=True)
class ObjectsURL:
    """The parts of ``cache.objects_url``."""

    endpoint: str
    """``scheme://host[:port]``, no path."""
    bucket: str
    prefix: str
    """Key prefix without slashes at either end; empty for the bucket's root."""

    @property
    def secure(self) -> bool:
        return self.endpoint.startswith("https://")

    def name(self, rest: str) -> str:
        """The object name of ``rest`` under the prefix."""
        return f"{self.prefix}/{rest}" if self.prefix else rest

    def __str__(self) -> str:
        return f"{self.endpoint}/{self.bucket}" + (f"/{self.prefix}" if self.prefix else "")


def parse_objects_url(url: str) -> ObjectsURL:
    """Parse and check ``url``; raises :class:`ConfigError` saying how to fix it. The
    message never repeats a password put in the URL."""
    if not isinstance(url, str) or not url.strip():
        raise ConfigError(f"{_KEY}: give an S3 endpoint URL with the bucket as its path, e.g. {_EXAMPLE}")
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise ConfigError(f"{_KEY}: not a URL ({exc}); use e.g. {_EXAMPLE}") from None
    if parts.username is not None or parts.password is not None:
        raise ConfigError(
            f"{_KEY}: credentials do not belong in the URL (they would be logged); "
            "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY instead"
        )
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{_KEY}: must be an http:// or https:// endpoint with a host, e.g. {_EXAMPLE}")
    if parts.query or parts.fragment:
        raise ConfigError(f"{_KEY}: takes no query or fragment; the path is bucket/prefix, e.g. {_EXAMPLE}")
    bucket, _, prefix = parts.path.strip("/").partition("/")
    prefix = prefix.strip("/")
    if not _BUCKET_RE.match(bucket):
        raise ConfigError(
            f"{_KEY}: the first path segment must be the bucket (3-63 lower-case letters, digits, dots or "
            f"hyphens), got {bucket!r}; e.g. {_EXAMPLE}"
        )
    if prefix and not _PREFIX_RE.match(prefix):
        raise ConfigError(
            f"{_KEY}: the key prefix may hold letters, digits, '.', '_', '-' and '/' only, got {prefix!r}"
        )
    host = parts.hostname if ":" not in parts.hostname else f"[{parts.hostname}]"
    endpoint = f"{parts.scheme}://{host}" + (f":{port}" if port is not None else "")
    return ObjectsURL(endpoint, bucket, prefix)
