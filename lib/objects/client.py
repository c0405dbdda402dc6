"""A small S3 client: the calls the object tier makes, over one pooled httpx client.

GET, HEAD, PUT (with metadata and the conditional headers ``If-None-Match: *`` and
``If-Match``), DELETE, multi-object delete, ListObjectsV2 and presigned GET URLs,
path-style (``endpoint/bucket/key``), signed with :mod:`lib.objects.sigv4`. No retries
and short time-outs: the tier's breaker decides when to try again.

A missing object is an answer (None), a failed precondition too (a lock taken by
someone else); any other refusal raises :class:`S3Error` with the store's code and
message (never a header or a credential), a network fault raises httpx's error.
:func:`trips` tells the breaker which of them mean "the store is not usable now".
"""

from __future__ import annotations

import base64
import hashlib
import logging
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from urllib.parse import urlsplit
from xml.sax.saxutils import escape

import httpx

from lib.config.objects import ObjectsURL
from lib.objects.sigv4 import EMPTY_SHA256, Credentials, canonical_path, canonical_query, presign, sign

__all__ = ["Got", "Listed", "ObjectClient", "S3Error", "trips"]

_LOGGER = logging.getLogger(__name__)

_DELETE_BATCH = 1000  # S3's limit per multi-object delete
_META = "x-amz-meta-"


class S3Error(Exception):
    """The store refused a request (HTTP status and S3 error code)."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"HTTP {status} {code}: {message}".strip())
        self.status = status
        self.code = code


def trips(exc: BaseException) -> bool:
    """Whether ``exc`` means the store is not usable now (open the breaker): network
    faults and time-outs, server errors (500, 503 SlowDown), refused credentials (403)
    and a missing bucket. Other refusals (an object too large) are counted only."""
    if isinstance(exc, S3Error):
        return exc.status >= 500 or exc.status in (401, 403) or exc.code == "NoSuchBucket"
    return True


@dataclass(frozen=True)
class Got:
    """An object read (or its headers, from HEAD)."""

    body: bytes
    etag: str
    metadata: Mapping[str, str] = field(default_factory=dict)
    """``x-amz-meta-*`` headers, without the prefix."""
    last_modified: float | None = None
    """Unix time, from the store's clock (1 s resolution)."""
    date: float | None = None
    """The store's clock when it answered (its ``Date`` header)."""


@dataclass(frozen=True)
class Listed:
    name: str
    size: int


class ObjectClient:
    """Calls to one bucket. Thread-safe (httpx's client pools connections)."""

    def __init__(
        self, url: ObjectsURL, creds: Credentials, *, timeout: float = 1.0, write_timeout: float = 5.0,
        connections: int = 16,
    ) -> None:  # fmt: skip
        self.url = url
        self._creds = creds
        self._host = urlsplit(url.endpoint).netloc
        self._http = httpx.Client(
            timeout=httpx.Timeout(timeout, connect=min(timeout, 1.0), write=write_timeout),
            limits=httpx.Limits(max_connections=connections, max_keepalive_connections=connections),
            follow_redirects=False,
        )

    # -- objects ----------------------------------------------------------------------------

    def get(self, name: str) -> Got | None:
        """The object, or None if there is none."""
        response = self._send("GET", name)
        return None if response is None else _got(response, response.content)

    def head(self, name: str) -> Got | None:
        response = self._send("HEAD", name)
        return None if response is None else _got(response, b"")

    def put(
        self,
        name: str,
        body: bytes,
        *,
        metadata: Mapping[str, str] | None = None,
        content_type: str = "application/octet-stream",
        if_none_match: bool = False,
        if_match: str | None = None,
    ) -> str | None:
        """Store ``body``; its ETag, or None when a condition failed: ``if_none_match``
        (create only: the object exists) or ``if_match`` (it changed since)."""
        headers = {"content-type": content_type}
        headers.update({_META + k.lower(): v for k, v in (metadata or {}).items()})
        if if_none_match:
            headers["if-none-match"] = "*"
        if if_match is not None:
            headers["if-match"] = if_match
        response = self._send("PUT", name, body=body, headers=headers, conditional=True)
        return None if response is None else response.headers.get("etag", "")

    def delete(self, name: str) -> None:
        self._send("DELETE", name)

    def delete_many(self, names: Sequence[str]) -> int:
        """Delete ``names`` (missing ones count as deleted, as S3 reports them); how many."""
        deleted = 0
        for start in range(0, len(names), _DELETE_BATCH):
            batch = names[start : start + _DELETE_BATCH]
            objects = "".join(f"<Object><Key>{escape(n)}</Key></Object>" for n in batch)
            body = f'<Delete xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Quiet>true</Quiet>{objects}</Delete>'
            data = body.encode()
            md5 = base64.b64encode(hashlib.md5(data).digest()).decode()  # Content-MD5: required by the API
            response = self._send(
                "POST", "", params={"delete": ""}, body=data,
                headers={"content-type": "application/xml", "content-md5": md5},
            )  # fmt: skip
            failed = _texts(response.content, "Error", "Code") if response is not None else []
            if failed:
                raise S3Error(200, failed[0], f"{len(failed)} of {len(batch)} objects were not deleted")
            deleted += len(batch)
        return deleted

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[Listed]:
        """Objects whose names start with ``prefix``, in name order, page by page."""
        token: str | None = None
        while True:
            params = {"list-type": "2", "prefix": prefix, "max-keys": "1000"}
            if token is not None:
                params["continuation-token"] = token
            elif start_after:
                params["start-after"] = start_after
            response = self._send("GET", "", params=params)
            if response is None:
                raise S3Error(404, "NoSuchBucket", f"bucket {self.url.bucket} does not exist")
            root = ET.fromstring(response.content)
            for item in _children(root, "Contents"):
                name, size = _child_text(item, "Key"), _child_text(item, "Size")
                yield Listed(name, int(size or 0))
            token = _child_text(root, "NextContinuationToken") or None
            if _child_text(root, "IsTruncated") != "true" or token is None:
                return

    def presign_get(self, name: str, expires: int, params: Mapping[str, str] | None = None) -> str:
        """A URL anyone may GET ``name`` with, for ``expires`` seconds."""
        path = self._path(name)
        query = presign(self._creds, "GET", self._host, path, expires, params)
        return f"{self.url.endpoint}{canonical_path(path)}?{query}"

    # -- buckets ----------------------------------------------------------------------------

    def check_bucket(self) -> None:
        """Raise :class:`S3Error` unless the bucket exists and answers our credentials."""
        if self._send("HEAD", "") is None:
            raise S3Error(404, "NoSuchBucket", f"bucket {self.url.bucket} does not exist; create it")

    def create_bucket(self) -> None:
        """Create the bucket (tests, and first set-up; 409 if it exists and is ours)."""
        self._send("PUT", "")

    def close(self) -> None:
        self._http.close()

    # -- internals --------------------------------------------------------------------------

    def _path(self, name: str) -> str:
        return f"/{self.url.bucket}" + (f"/{name}" if name else "")

    def _send(
        self,
        method: str,
        name: str,
        *,
        params: Mapping[str, str] | None = None,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
        conditional: bool = False,
    ) -> httpx.Response | None:
        """The response; None for 404 NoSuchKey (and, with ``conditional``, for 412 or
        409: a condition failed, or a concurrent conditional write won)."""
        path = self._path(name)
        digest = hashlib.sha256(body).hexdigest() if body else EMPTY_SHA256
        signed = sign(self._creds, method, self._host, path, params, headers, digest)
        query = canonical_query(params or {})
        url = f"{self.url.endpoint}{canonical_path(path)}" + (f"?{query}" if query else "")
        response = self._http.request(method, url, content=body or None, headers=signed)
        if response.status_code < 300:
            return response
        code, message = _error(response)
        if response.status_code == 404 and code != "NoSuchBucket":
            return None
        if conditional and response.status_code in (409, 412):
            return None
        raise S3Error(response.status_code, code, message)


def _got(response: httpx.Response, body: bytes) -> Got:
    headers = response.headers
    metadata = {k[len(_META) :]: v for k, v in headers.items() if k.lower().startswith(_META)}
    return Got(
        body,
        headers.get("etag", ""),
        metadata,
        _http_time(headers.get("last-modified")),
        _http_time(headers.get("date")),
    )


def _http_time(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None


def _error(response: httpx.Response) -> tuple[str, str]:
    """The S3 error code and message of a refusal (HEAD has no body: the status's name)."""
    code = message = ""
    if response.content:
        try:
            root = ET.fromstring(response.content)
            code, message = _child_text(root, "Code"), _child_text(root, "Message")
        except ET.ParseError:
            message = response.text[:200]
    if not code:
        code = {403: "AccessDenied", 404: "NotFound", 412: "PreconditionFailed"}.get(response.status_code, "")
        code = code or response.reason_phrase.replace(" ", "")
    return code, message[:300]


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _children(root: ET.Element, name: str) -> list[ET.Element]:
    return [child for child in root if _local(child.tag) == name]


def _child_text(root: ET.Element, name: str) -> str:
    for child in root:
        if _local(child.tag) == name:
            return child.text or ""
    return ""


def _texts(content: bytes, parent: str, name: str) -> list[str]:
    try:
        root = ET.fromstring(content)
    except ET.ParseError:
        return []
    return [_child_text(item, name) for item in root.iter() if _local(item.tag) == parent]
