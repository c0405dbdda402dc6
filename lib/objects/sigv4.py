"""AWS Signature Version 4 for S3 requests: the ``Authorization`` header of a request,
and presigned URLs (query-string signing).

Written here rather than taken from botocore (about 100 MB installed, ~0.4 s to import,
its own retries and, since 1.36, checksum headers some S3-compatible stores refuse) for
the handful of calls the object tier makes. tests/test_objects_sigv4.py checks it
against botocore's signer and AWS's published example, and every tier test runs it
against a real S3-protocol server.

Credentials come from the standard variables only (``AWS_ACCESS_KEY_ID``,
``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``, ``AWS_DEFAULT_REGION``); the secret is
kept out of every ``repr`` and never leaves this module except as a signature.
"""

from __future__ import annotations

import hashlib
import hmac
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from urllib.parse import quote

from lib.errors import ConfigError

__all__ = ["EMPTY_SHA256", "UNSIGNED", "Credentials", "presign", "sign"]

EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
UNSIGNED = "UNSIGNED-PAYLOAD"
_ALGORITHM = "AWS4-HMAC-SHA256"
_SERVICE = "s3"


@dataclass(frozen=True)
class Credentials:
    """An access key and its secret, and the region requests are signed for."""

    access_key: str
    secret_key: str = field(repr=False)
    region: str = "us-east-1"
    session_token: str | None = field(default=None, repr=False)

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Credentials:
        """From ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` (required),
        ``AWS_SESSION_TOKEN`` and ``AWS_DEFAULT_REGION`` (default us-east-1, which is also
        what MinIO answers to unless configured otherwise)."""
        env = os.environ if env is None else env
        access, secret = env.get("AWS_ACCESS_KEY_ID", ""), env.get("AWS_SECRET_ACCESS_KEY", "")
        if not access or not secret:
            raise ConfigError(
                "cache.objects_url is set but AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not: "
                "export the object store's access key and secret in the app's environment"
            )
        region = env.get("AWS_DEFAULT_REGION") or env.get("AWS_REGION") or "us-east-1"
        return cls(access, secret, region, env.get("AWS_SESSION_TOKEN") or None)


def _quote(text: str, safe: str = "-_.~") -> str:
    return quote(text, safe=safe)


def canonical_path(path: str) -> str:
    """S3's canonical URI: each segment percent-encoded once (S3 does not double-encode)."""
    return _quote(path, safe="/-_.~")


def canonical_query(params: Mapping[str, str]) -> str:
    return "&".join(f"{_quote(k)}={_quote(v)}" for k, v in sorted(params.items()))


def _signing_key(secret: str, date: str, region: str) -> bytes:
    key = hmac.new(("AWS4" + secret).encode(), date.encode(), hashlib.sha256).digest()
    for part in (region, _SERVICE, "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    return key


def _signature(
    creds: Credentials, amz_date: str, method: str, path: str, query: str, headers: Mapping[str, str], payload: str
) -> tuple[str, str, str]:
    """(signature, credential scope, signed header names) of one canonical request."""
    names = sorted(headers)
    canonical_headers = "".join(f"{n}:{' '.join(headers[n].split())}\n" for n in names)
    signed = ";".join(names)
    request = "\n".join((method, canonical_path(path), query, canonical_headers, signed, payload))
    scope = f"{amz_date[:8]}/{creds.region}/{_SERVICE}/aws4_request"
    to_sign = "\n".join((_ALGORITHM, amz_date, scope, hashlib.sha256(request.encode()).hexdigest()))
    key = _signing_key(creds.secret_key, amz_date[:8], creds.region)
    return hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest(), scope, signed


def sign(
    creds: Credentials,
    method: str,
    host: str,
    path: str,
    params: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
    payload_sha256: str = EMPTY_SHA256,
    now: datetime | None = None,
) -> dict[str, str]:
    """The headers to send with a request: ``headers`` (every one of them signed) plus
    ``host``, ``x-amz-date``, ``x-amz-content-sha256``, the session token if any, and
    ``authorization``. ``path`` is the unescaped ``/bucket/key``."""
    amz_date = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    out = {k.lower(): v for k, v in (headers or {}).items()}
    out.update({"host": host, "x-amz-date": amz_date, "x-amz-content-sha256": payload_sha256})
    if creds.session_token:
        out["x-amz-security-token"] = creds.session_token
    signature, scope, signed = _signature(
        creds, amz_date, method, path, canonical_query(params or {}), out, payload_sha256
    )
    out["authorization"] = (
        f"{_ALGORITHM} Credential={creds.access_key}/{scope}, SignedHeaders={signed}, Signature={signature}"
    )
    return out


def presign(
    creds: Credentials,
    method: str,
    host: str,
    path: str,
    expires: int,
    params: Mapping[str, str] | None = None,
    now: datetime | None = None,
) -> str:
    """The query string of a presigned URL for ``method path`` valid ``expires`` seconds
    (1 to 604800, S3's limit): anyone holding the URL may make that one request."""
    amz_date = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    scope = f"{amz_date[:8]}/{creds.region}/{_SERVICE}/aws4_request"
    query = dict(params or {})
    query.update(
        {
            "X-Amz-Algorithm": _ALGORITHM,
            "X-Amz-Credential": f"{creds.access_key}/{scope}",
            "X-Amz-Date": amz_date,
            "X-Amz-Expires": str(max(1, min(int(expires), 604800))),
            "X-Amz-SignedHeaders": "host",
        }
    )
    if creds.session_token:
        query["X-Amz-Security-Token"] = creds.session_token
    signature, _, _ = _signature(creds, amz_date, method, path, canonical_query(query), {"host": host}, UNSIGNED)
    return canonical_query(query) + "&X-Amz-Signature=" + signature
