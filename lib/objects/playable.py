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
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lib.audio.pcm import MIME_TYPES
from lib.cache.breaker import Breaker
from lib.cache.entry import CachedAudio
from lib.objects.client import ObjectClient
from lib.objects.layout import PLAYABLE, Layout

__all__ = ["Playable"]

_MAX_AGE = 3600
_FAULT: Any = object()


class Playable:
    def __init__(self, client: ObjectClient, layout: Layout, breaker: Breaker) -> None:
        self.client = client
        self.layout = layout
        self.breaker = breaker

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
        if found is None:
            metadata = {"expires": repr(float(entry.expires))} if entry.expires is not None else None

            def upload() -> bool:
                # Create-only: a concurrent upload by another replica is the same bytes.
                self.client.put(name, audio(), metadata=metadata, content_type=MIME_TYPES[fmt], if_none_match=True)
                return True

            if not self.breaker.call("put copy", upload, False):
                return None
        return self.client.presign_get(name, expires)
