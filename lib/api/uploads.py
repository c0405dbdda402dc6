"""Reading uploaded files of the API: the size limit is checked before the body is
read whole, and an empty file is a clear 400, for every endpoint that takes one."""

from __future__ import annotations

from starlette.datastructures import UploadFile  # FastAPI's is a subclass of it

from lib.errors import PayloadTooLargeError, ValidationError

from .http import too_large_message

__all__ = ["read_upload"]


async def read_upload(upload: UploadFile | None, field: str, limit: int) -> bytes | None:
    """The uploaded bytes of ``field``; None when the field was left empty."""
    if upload is None or not (upload.size or upload.filename):
        return None
    if upload.size is not None and upload.size > limit:
        raise PayloadTooLargeError(too_large_message(limit))
    data = await upload.read()
    if not data:
        raise ValidationError(f"{field}: the uploaded file is empty; upload a recording of speech")
    return data
