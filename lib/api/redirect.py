"""``GET /api/audio/{key}.wav|flac`` answered with a 302 to a presigned URL of the audio
in the object store (``cache.objects_redirect``), so that a CDN or the client fetches
the bytes there and not through the app. None when there is nothing to redirect to
(the setting is off, another format, the store is unreachable): the endpoint then
serves the bytes itself, as always."""

from __future__ import annotations

from anyio import to_thread
from fastapi.responses import Response

from lib.cache.entry import CachedAudio
from lib.pipeline.service import TTSService

from .http import NO_STORE

__all__ = ["object_redirect"]


async def object_redirect(service: TTSService, entry: CachedAudio, fmt: str) -> Response | None:
    objects = service.cache.objects
    if objects is None or not objects.redirects(fmt):
        return None
    location = await to_thread.run_sync(objects.redirect_url, entry, fmt, lambda: service.cache.audio_bytes(entry, fmt))
    if location is None:
        return None
    # Not cached: the presigned URL expires (at most in an hour), the key's audio does not.
    return Response(status_code=302, headers={"Location": location, "Cache-Control": NO_STORE})
