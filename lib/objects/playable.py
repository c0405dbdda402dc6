"""Playable copies for ``cache.objects_redirect``: ``GET /api/audio/{key}.wav|flac`` may
answer 302 to a presigned URL of the audio in the store, so a CDN or the client fetches
the bytes from there instead of through the app.

An entry object is the packed format (a header, then FLAC), which no player reads, so
the redirect points at a plain copy, ``<prefix>/p/<key>.wav`` or ``.flac``, with its
content type and the entry's expiry. Copies are made on demand, not for every entry
(most results are only ever fetched through ``/api/tts``): the first ``/api/audio``
request for one uploads it (a create-only PUT, so replicas racing write it once) and is
redirected like every later one. Evictions, sweeps and clears delete copies with their
entries. A presigned URL lives for at most an hour and never past the entry's TTL.

With ``cache.secret`` no client is sent to a copy not checked first: the entry it is made
from was checked by its tag on its way out of the store, and the copy must be exactly that
entry's audio (the store's MD5 ETag of a single-part PUT, else its bytes read back) and
carry the tag of that audio (``x-amz-meta-mac``). A copy that is not (forged, or written
before the secret) is refused, counted and uploaded again over it, then redirected to.
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Callable
from typing import Any

from lib.audio.pcm import MIME_TYPES
from lib.cache.breaker import Breaker
from lib.cache.entry import CachedAudio
from lib.cache.signing import Signer
from lib.objects.client import ObjectClient
from lib.objects.layout import PLAYABLE, Layout

__all__ = ["Playable"]

_MAX_AGE = 3600
_FAULT: Any = object()
_MD5 = re.compile(r"[0-9a-f]{32}")


class Playable:
    def __init__(
        self, client: ObjectClient, layout: Layout, breaker: Breaker, signer: Signer | None = None,
        on_reject: Callable[[], None] = lambda: None,
    ) -> None:  # fmt: skip
        self.client = client
        self.layout = layout
        self.breaker = breaker
        self.signer = signer or Signer()
        self._on_reject = on_reject

    def url(self, entry: CachedAudio, fmt: str, audio: Callable[[], bytes]) -> str | None:
        """A presigned GET URL of ``entry``'s ``fmt`` copy (uploaded first if missing);
        None when there is none to give (then the caller serves the bytes itself)."""
        if fmt not in PLAYABLE:
            return None
        remaining = entry.remaining()
        expires = _MAX_AGE if remaining is None else min(_MAX_AGE, int(remaining))
        if expires < 1:
            return None
        name = self.layout.playable(entry.key, fmt)
        found = self.breaker.call("head", lambda: self.client.head(name), _FAULT)
        if found is _FAULT:
            return None
        if self.signer.enabled:
            return self._checked(entry, fmt, name, found, audio(), expires)
        if found is None:
            metadata = {"expires": repr(float(entry.expires))} if entry.expires is not None else None

            def upload() -> bool:
                # Create-only: a concurrent upload by another replica is the same bytes.
                self.client.put(name, audio(), metadata=metadata, content_type=MIME_TYPES[fmt], if_none_match=True)
                return True

            if not self.breaker.call("put copy", upload, False):
                return None
        return self.client.presign_get(name, expires)

    def _checked(self, entry: CachedAudio, fmt: str, name: str, found: Any, body: bytes, expires: int) -> str | None:
        """The redirect with ``cache.secret``: to the copy once it is shown to be ``body``
        (the checked entry's audio) with its tag, else after writing ``body`` over it."""
        what = f"{entry.key}.{fmt}"
        if found is not None:
            genuine = self.breaker.call("check copy", lambda: self._genuine(found, name, what, body), _FAULT)
            if genuine is _FAULT:
                return None
            if genuine:
                return self.client.presign_get(name, expires)
            self._on_reject()
            self.signer.reject("objects", "playable copy", what, "not the entry's audio or no valid tag")
        metadata = {"mac": self.signer.tag("copy", what, body).hex()}
        if entry.expires is not None:
            metadata["expires"] = repr(float(entry.expires))

        def upload() -> bool:
            # Not create-only: whatever is there (forged, or another replica's same bytes) is replaced.
            return self.client.put(name, body, metadata=metadata, content_type=MIME_TYPES[fmt]) is not None

        if not self.breaker.call("put copy", upload, False):
            return None
        return self.client.presign_get(name, expires)

    def _genuine(self, found: Any, name: str, what: str, body: bytes) -> bool:
        """Whether the copy ``found`` (its HEAD) holds ``body`` and the tag of it."""
        try:
            tag = bytes.fromhex(str(found.metadata.get("mac", "")))
        except ValueError:
            return False
        if not self.signer.valid("copy", what, body, tag):
            return False
        etag = str(found.etag).strip('"').lower()
        if _MD5.fullmatch(etag):  # a single-part PUT's ETag is the MD5 of its bytes, computed by the store
            return hmac.compare_digest(etag, hashlib.md5(body, usedforsecurity=False).hexdigest())
        got = self.client.get(name)  # a store whose ETag is no MD5 (multipart, SSE-KMS): read the bytes
        return got is not None and hmac.compare_digest(got.body, body)
