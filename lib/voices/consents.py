"""Consent records: who agreed to have a voice cloned, when, and on which recording.

OpenAI's custom voices need a consent recording first (``POST /v1/audio/voice_consents``:
the speaker reading a consent phrase), then a voice made from a sample names that consent
(``POST /v1/audio/voices``). Here a consent is a small record in the voice library's own
store (``consent:<id>``, private like the voices): its label (the name the uploader gave,
normally the speaker's), language, creation time, who sent it (address, admin or not)
and the recording's fingerprint (the md5 of its canonical PCM, as voices are
fingerprinted). The recording itself is not kept: the fingerprint identifies it, and a
voice sample is all the library needs to hold. A voice made with a consent keeps a copy
of the record beside it (:class:`lib.voices.library.SavedVoice`), so deleting the
consent later does not erase what the voice was made under.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Mapping
from typing import Any, cast

from lib.cache.handle import STORE_ERRORS, DiskHandle
from lib.core.logtext import cut_text
from lib.core.reports import ConsentRecord
from lib.errors import StoreUnavailableError, ValidationError

__all__ = ["ConsentBook", "check_label", "check_language"]

_LOGGER = logging.getLogger(__name__)

_PREFIX = "consent:"
_UNAVAILABLE = (
    "the voice library cannot write now (the cache directory is full, read-only or missing); "
    "nothing was saved: try again later, and tell the operator to check cache.dir"
)


def check_label(name: str, field: str = "name") -> str:
    clean = name.strip() if isinstance(name, str) else ""
    if not clean or len(clean) > 200 or any(ord(c) < 32 for c in clean):
        raise ValidationError(f"{field}: give a label of 1-200 characters on one line (who consented)")
    return clean


def check_language(language: str) -> str:
    clean = language.strip() if isinstance(language, str) else ""
    parts = clean.split("-")
    if not clean or len(clean) > 35 or not all(p.isascii() and p.isalnum() and 1 <= len(p) <= 8 for p in parts):
        raise ValidationError(
            f"language: {cut_text(repr(language))} is not a BCP 47 tag; give one such as en-US or zh-CN"
        )
    return clean


class ConsentBook:
    """Consent records in ``store`` (the voice library's)."""

    def __init__(self, store: DiskHandle | None) -> None:
        self._store = store

    def create(
        self, *, name: str, language: str, fingerprint: str, seconds: float, recorded_by: Mapping[str, Any]
    ) -> ConsentRecord:
        consent_id = f"cons_{secrets.token_hex(12)}"
        record: ConsentRecord = {
            "id": consent_id,
            "name": check_label(name),
            "language": check_language(language),
            "created_at": int(time.time()),
            "fingerprint": fingerprint,
            "seconds": round(seconds, 2),
            "recorded_by": dict(recorded_by),
        }
        self._write("save consent", lambda cache: cache.set(_PREFIX + consent_id, record))
        _LOGGER.info("consent recorded: %s (%s)", consent_id, cut_text(record["name"]))
        return record

    def get(self, consent_id: str) -> ConsentRecord | None:
        if not consent_id.startswith("cons_"):
            return None
        if self._store is None:
            return None
        with self._store.using("get consent") as cache:
            record = cache.get(_PREFIX + consent_id) if cache is not None else None
            return cast(ConsentRecord, dict(record)) if isinstance(record, dict) else None
        return None

    def list(self) -> list[ConsentRecord]:
        """Every record, oldest first (ties by id)."""
        found: list[ConsentRecord] = []
        if self._store is not None:
            with self._store.using("list consents") as cache:
                if cache is not None:
                    for key in cache.iterkeys():
                        if str(key).startswith(_PREFIX):
                            record = cache.get(key)
                            if isinstance(record, dict):
                                found.append(cast(ConsentRecord, dict(record)))
        return sorted(found, key=lambda r: (int(r.get("created_at", 0)), str(r.get("id"))))

    def rename(self, consent_id: str, name: str) -> ConsentRecord | None:
        record = self.get(consent_id)
        if record is None:
            return None
        record["name"] = check_label(name)
        self._write("rename consent", lambda cache: cache.set(_PREFIX + consent_id, record))
        return record

    def delete(self, consent_id: str) -> bool:
        removed: list[bool] = []
        self._write("delete consent", lambda cache: removed.append(bool(cache.delete(_PREFIX + consent_id))))
        return bool(removed and removed[0])

    def _write(self, op: str, action: Any) -> None:
        store = self._store
        cache = store.open(write=True) if store is not None else None
        if store is None or cache is None:
            raise StoreUnavailableError(_UNAVAILABLE)
        try:
            action(cache)
        except STORE_ERRORS as exc:
            store.failed(op, exc, cache)
            raise StoreUnavailableError(_UNAVAILABLE) from exc
