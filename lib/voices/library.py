"""The voice library: named prompt voices (canonical PCM + transcript), private
(0600), so that operators can pick "front-desk" instead of uploading the same file
again. A saved voice behaves exactly like uploading its prompt: same fingerprint, same
keys.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Mapping
from typing import Any, cast

import numpy as np

from lib.audio.encoders import encode
from lib.audio.pcm import PromptAudio, decode_flac
from lib.cache.handle import STORE_ERRORS, DiskHandle
from lib.core.logtext import cut_text
from lib.core.reports import VoiceInfo, VoiceRecord
from lib.engines.base import PROMPT_SAMPLE_RATE
from lib.errors import ConflictError, StoreFullError, StoreUnavailableError, ValidationError
from lib.voices.consents import ConsentBook
from lib.voices.names import normalise_name
from lib.voices.tiers import SharedVoices

__all__ = ["NAME_RE", "SavedVoice", "VoiceLibrary"]

_LOGGER = logging.getLogger(__name__)

#: Voice names: letters (any script), digits, space, dot, dash, underscore; 1-64 chars.
NAME_RE = re.compile(r"^[\w][\w .\-]{0,63}$")


class SavedVoice:
    """A named prompt voice from the library."""

    __slots__ = ("consent", "created", "name", "prompt", "prompt_text")

    def __init__(
        self, name: str, prompt: PromptAudio, prompt_text: str, created: float,
        consent: Mapping[str, Any] | None = None,
    ) -> None:  # fmt: skip
        self.name = name
        self.prompt = prompt
        self.prompt_text = prompt_text
        self.created = created
        self.consent = dict(consent) if consent else None
        """The consent record it was made under (lib.voices.consents), a copy kept beside it."""

    def describe(self) -> VoiceInfo:
        described: VoiceInfo = {
            "name": self.name,
            "kind": "saved",
            "prompt_text": self.prompt_text,
            "seconds": round(self.prompt.seconds, 2),
            "fingerprint": self.prompt.fingerprint,
            "created": self.created,
        }
        if self.consent is not None:
            described["consent"] = self.consent.get("id")
        return described


class VoiceLibrary:
    """Named voices in a private diskcache (``<cache.dir>/voices``). Values are the
    canonical prompt as FLAC plus its transcript."""

    #: With a shared tier, how long a voice read from it is trusted before it is read
    #: again, so that a voice deleted on another replica disappears here too.
    SHARED_FRESH_SECONDS = 10.0

    def __init__(self, store: DiskHandle | None, *, max_saved: int = 1000, shared: SharedVoices | None = None) -> None:
        self._store = store
        self.max_saved = max_saved
        self._memory: dict[str, tuple[SavedVoice, float]] = {}
        self._lock = threading.Lock()
        self.shared = shared
        """The shared tier's voice keys (the authority for saved voices), or None."""
        self.consents = ConsentBook(store)
        """Consent records for voices made through the OpenAI API (same store, same privacy)."""

    @property
    def store(self) -> DiskHandle | None:
        """The disk store the saved voices are kept in (this replica's own copy)."""
        return self._store

    def _remember(self, voice: SavedVoice) -> None:
        with self._lock:
            self._memory[voice.name] = (voice, time.monotonic())

    def _fresh(self, at: float) -> bool:
        return self.shared is None or time.monotonic() - at < self.SHARED_FRESH_SECONDS

    def _recalled(self) -> dict[str, SavedVoice]:
        """The voices in memory that are still fresh."""
        with self._lock:
            return {name: voice for name, (voice, at) in self._memory.items() if self._fresh(at)}

    @staticmethod
    def check_name(name: str) -> str:
        """The name as saved: NFKC (fullwidth forms and ligatures become the letters
        they stand for), trimmed; refused unless it matches :data:`NAME_RE`."""
        clean = normalise_name(name)
        if not NAME_RE.match(clean):
            raise ValidationError(
                f"voice name {cut_text(name)!r} is not allowed: use 1-64 letters, digits, spaces, '.', '-' or '_', "
                "starting with a letter or digit"
            )
        return clean

    def exists(self, name: str) -> bool:
        """Whether a voice is saved under ``name`` (in any tier)."""
        return self.get(name) is not None

    def save(
        self, name: str, prompt: PromptAudio, prompt_text: str, *, replace: bool = False,
        consent: Mapping[str, Any] | None = None,
    ) -> SavedVoice:  # fmt: skip
        """Save ``name``; unless ``replace``, refuse (409) a name that exists. ``consent``:
        the consent record the voice is made under, stored beside it."""
        name = self.check_name(name)
        if not replace and self.exists(name):
            raise ConflictError(taken_message(name))
        if not replace and len(self.names()) >= self.max_saved:
            raise ConflictError(
                f"the voice library is full ({self.max_saved} voices, voices.max_saved); "
                "ask the admin to delete voices that are no longer used"
            )
        voice = SavedVoice(name, prompt, prompt_text, time.time(), consent)
        flac = encode(prompt.pcm, PROMPT_SAMPLE_RATE, "flac")
        record: VoiceRecord = {
            "flac": flac,
            "prompt_text": prompt_text,
            "created": voice.created,
            "fingerprint": prompt.fingerprint,
        }
        if voice.consent is not None:
            record["consent"] = voice.consent
        cache = self._store.open(write=True) if self._store is not None else None
        if cache is None and self.shared is None:
            raise StoreUnavailableError(_UNAVAILABLE)
        if cache is not None and self._store is not None:
            try:
                size_cap = int(getattr(cache, "size_limit", 0) or 0)
                if size_cap and cache.volume() + len(flac) > size_cap:
                    raise StoreFullError(_full_message(size_cap))
                if replace:
                    cache.set(f"voice:{name}", record)
                elif not cache.add(f"voice:{name}", record):  # atomic: two saves race, one wins
                    raise ConflictError(taken_message(name))
            except STORE_ERRORS as exc:
                self._store.failed("save voice", exc, cache)
                raise StoreUnavailableError(_UNAVAILABLE) from exc
        if self.shared is not None:
            self.shared.put_voice(name, record)
        self._remember(voice)
        return voice

    def remembered(self, name: str) -> SavedVoice | None:
        """The voice from memory alone when :meth:`get` would answer it from there (no
        store or Redis read: cheap enough for an event loop), else None."""
        with self._lock:
            remembered = self._memory.get(name)
        if remembered is not None and self._fresh(remembered[1]):
            return remembered[0]
        return None

    def get(self, name: str) -> SavedVoice | None:
        found = self.remembered(name)
        if found is not None:
            return found
        record = self._local(name) if self.shared is None else self._reconciled(name, self.shared)
        if record is None:
            with self._lock:
                self._memory.pop(name, None)
            return None
        voice = _from_record(name, record)
        if voice is None:
            return None
        self._remember(voice)
        return voice

    def names(self) -> list[str]:
        found: set[str] = set()
        if self._store is not None:
            with self._store.using("list voices") as cache:
                if cache is not None:
                    found.update(k[len("voice:") :] for k in cache.iterkeys() if str(k).startswith("voice:"))
        index = self.shared.voice_index() if self.shared is not None else None
        if index is not None:  # Redis decides about the local copies it does not list
            found = set(index) | {name for name in found - set(index) if self.get(name) is not None}
        found.update(self._recalled())
        return sorted(found)

    def _local(self, name: str) -> VoiceRecord | None:
        if self._store is None:
            return None
        with self._store.using("get voice") as cache:
            record = cache.get(f"voice:{name}") if cache is not None else None
            return cast(VoiceRecord, record) if isinstance(record, dict) else None
        return None

    def _reconciled(self, name: str, shared: SharedVoices) -> VoiceRecord | None:
        """The voice as Redis and the local copy agree on it, Redis being the authority
        while it answers; the newer of the two wins (by creation time), so a voice
        deleted or replaced on another replica is not brought back by a stale local
        copy, and one saved here while Redis was down is published once it is back."""
        local = self._local(name)
        state = shared.voice_state(name)
        if state is None:
            return local  # Redis is down: the local copy, if any
        remote, deleted_at = state
        local_at = _created(local) if local is not None else None
        if remote is not None and (local_at is None or _created(remote) >= local_at):
            if local is not None and local.get("fingerprint") != remote.get("fingerprint"):
                self._replace_local(name, remote)  # replaced elsewhere: keep the copy current
            return remote
        if local is None or local_at is None:
            return None
        if deleted_at is not None and deleted_at >= local_at:
            self._delete_local(name)  # deleted on another replica
            _LOGGER.info("saved voice %r was deleted on another replica; local copy removed", cut_text(name))
            return None
        shared.put_voice(name, local)  # saved or replaced here while Redis was down
        return local

    def _replace_local(self, name: str, record: VoiceRecord) -> None:
        if self._store is not None:
            with self._store.using("update voice", write=True) as cache:
                if cache is not None:
                    cache.set(f"voice:{name}", record)

    def _delete_local(self, name: str) -> None:
        if self._store is not None:
            with self._store.using("delete voice", write=True) as cache:
                if cache is not None:
                    cache.delete(f"voice:{name}")

    def drop_legacy_profiles(self) -> int:
        """Remove voice profiles that older versions kept beside the saved voices (they
        now have their own bounded store); return how many."""
        removed = 0
        if self._store is not None:
            with self._store.using("drop legacy profiles", write=True) as cache:
                if cache is not None:
                    for key in [k for k in cache.iterkeys() if str(k).startswith("profile:")]:
                        removed += bool(cache.delete(key))
        return removed

    def delete(self, name: str) -> bool:
        """Delete ``name`` from every tier; True if it was saved anywhere. Raises
        :class:`StoreUnavailableError` (nothing changed) when the store cannot write."""
        removed = False
        if self.shared is not None:
            # First, and refused while Redis is down: a deletion that does not reach the
            # shared tier would come back from it.
            gone = self.shared.delete_voice(name)
            if gone is None:
                raise StoreUnavailableError(
                    "the shared tier (Redis) cannot be reached, so the other replicas would keep this voice; "
                    "nothing was deleted: try again once it is back"
                )
            removed = gone
        if self._store is not None:
            cache = self._store.open(write=True)
            if cache is None and self.shared is None:
                raise StoreUnavailableError(_UNAVAILABLE)
            try:
                removed = bool(cache is not None and cache.delete(f"voice:{name}")) or removed
            except STORE_ERRORS as exc:
                self._store.failed("delete voice", exc, cache)
                raise StoreUnavailableError(_UNAVAILABLE) from exc
        with self._lock:
            removed = self._memory.pop(name, None) is not None or removed
        return removed


def _full_message(cap: int) -> str:
    return (
        f"the voice library is full ({cap / 2**20:.1f} MiB, a quarter of cache.size_limit); nothing was changed: "
        "delete voices that are no longer used, or ask the operator to raise cache.size_limit"
    )


_UNAVAILABLE = (
    "the voice library cannot write now (the cache directory is full, read-only or missing); "
    "nothing was changed: try again later, and tell the operator to check cache.dir"
)


def taken_message(name: str) -> str:
    return (
        f"voice name {name!r} is taken: choose another name, or (admin) replace it; "
        "voice names are shared by every user"
    )


def _created(record: VoiceRecord) -> float:
    try:
        return float(record.get("created", 0.0))
    except (TypeError, ValueError):
        return 0.0


def _from_record(name: str, record: VoiceRecord) -> SavedVoice | None:
    try:
        pcm, rate = decode_flac(record["flac"])
        if rate != PROMPT_SAMPLE_RATE:
            raise ValueError(f"sample rate {rate}")
        prompt = PromptAudio(np.ascontiguousarray(pcm, dtype=np.int16))
        if prompt.fingerprint != record.get("fingerprint", prompt.fingerprint):
            raise ValueError("fingerprint mismatch")
        prompt.pcm.setflags(write=False)
        consent = record.get("consent")
        return SavedVoice(
            name, prompt, str(record.get("prompt_text", "")), float(record.get("created", 0.0)),
            consent if isinstance(consent, dict) else None,
        )  # fmt: skip
    except Exception as exc:
        _LOGGER.warning("saved voice %r is damaged (%s); ignored", cut_text(name), exc)
        return None
