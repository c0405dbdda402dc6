"""Voices: the voice-profile cache and the named voice library.

*Profiles* are what an engine extracts from prompt audio (the expensive, cacheable
part). They are keyed by (prompt fingerprint, prompt text, engine, model version),
kept in an in-memory LRU bounded in bytes and persisted in a private diskcache, so a
voice is analysed once, not once per request or per restart.

The *library* keeps named prompt voices (canonical PCM + transcript), private (0600),
so that operators can pick "front-desk" instead of uploading the same file again. A
saved voice behaves exactly like uploading its prompt: same fingerprint, same keys.
"""

from __future__ import annotations

import hashlib
import logging
import re
import threading
import time
from collections.abc import Callable
from typing import Any

import diskcache
import numpy as np

from lib.audio import PromptAudio, decode_flac, encode
from lib.engines.base import PROMPT_SAMPLE_RATE, Engine, VoiceProfile
from lib.errors import ValidationError
from lib.lru import ByteLRU

__all__ = ["NAME_RE", "SavedVoice", "VoiceLibrary", "VoiceProfiles"]

_LOGGER = logging.getLogger(__name__)

#: Voice names: letters (any script), digits, space, dot, dash, underscore; 1-64 chars.
NAME_RE = re.compile(r"^[\w][\w .\-]{0,63}$")


class VoiceProfiles:
    """Profile cache in front of ``engine.extract_voice``; concurrent requests for the
    same new voice extract it once."""

    def __init__(
        self,
        engine: Engine,
        store: diskcache.Cache | None,
        memory_bytes: int,
        on_extract: Callable[[], None] = lambda: None,
    ) -> None:
        self.engine = engine
        self._store = store
        self._memory: ByteLRU[str, VoiceProfile] = ByteLRU(memory_bytes, lambda p: p.nbytes)
        self._on_extract = on_extract
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self.shared: Any = None
        """Optional shared tier (``lib.shared``) with ``get_profile``/``put_profile``."""

    def key(self, fingerprint: str, prompt_text: str) -> str:
        raw = f"{self.engine.name}\x00{self.engine.model_version}\x00{fingerprint}\x00{prompt_text}"
        return hashlib.md5(raw.encode("utf-8")).hexdigest()

    def get(self, prompt: PromptAudio, prompt_text: str) -> VoiceProfile:
        """The profile for this prompt, extracting it only if no tier has it."""
        key = self.key(prompt.fingerprint, prompt_text)
        found = self._lookup(key)
        if found is not None:
            return found
        with self._lock_for(key):
            found = self._lookup(key)
            if found is not None:
                return found
            started = time.perf_counter()
            profile = self.engine.extract_voice(prompt.pcm, prompt_text)
            self._on_extract()
            _LOGGER.info("extracted voice %s in %.0f ms", prompt.fingerprint[:8], (time.perf_counter() - started) * 1e3)
            self._memory.put(key, profile)
            blob = profile.to_bytes()
            if self._store is not None:
                try:
                    self._store.set(f"profile:{key}", blob)
                except Exception as exc:
                    _LOGGER.warning("cannot persist voice profile: %s", exc)
            if self.shared is not None:
                self.shared.put_profile(key, blob)
            return profile

    def _lookup(self, key: str) -> VoiceProfile | None:
        found = self._memory.get(key)
        if found is not None:
            return found
        shared_get = self.shared.get_profile if self.shared is not None else None
        blob = _read_tiers(self._store, f"profile:{key}", shared_get, key)
        if blob is None:
            return None
        try:
            profile = VoiceProfile.from_bytes(blob)
        except (ValueError, KeyError) as exc:
            _LOGGER.warning("stored voice profile %s is damaged (%s); extracting again", key, exc)
            return None
        if profile.engine != self.engine.name or profile.model_version != self.engine.model_version:
            return None
        self._memory.put(key, profile)
        return profile

    def _lock_for(self, key: str) -> threading.Lock:
        with self._locks_guard:
            if len(self._locks) > 1024:
                self._locks = {k: v for k, v in self._locks.items() if v.locked()}
            return self._locks.setdefault(key, threading.Lock())


class SavedVoice:
    """A named prompt voice from the library."""

    __slots__ = ("created", "name", "prompt", "prompt_text")

    def __init__(self, name: str, prompt: PromptAudio, prompt_text: str, created: float) -> None:
        self.name = name
        self.prompt = prompt
        self.prompt_text = prompt_text
        self.created = created

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": "saved",
            "prompt_text": self.prompt_text,
            "seconds": round(self.prompt.seconds, 2),
            "fingerprint": self.prompt.fingerprint,
            "created": self.created,
        }


class VoiceLibrary:
    """Named voices in a private diskcache (``<cache.dir>/voices``). Values are the
    canonical prompt as FLAC plus its transcript."""

    #: With a shared tier, how long a voice read from it is trusted before it is read
    #: again, so that a voice deleted on another replica disappears here too.
    SHARED_FRESH_SECONDS = 10.0

    def __init__(self, store: diskcache.Cache | None) -> None:
        self._store = store
        self._memory: dict[str, tuple[SavedVoice, float]] = {}
        self._lock = threading.Lock()
        self.shared: Any = None
        """Optional shared tier with ``get_voice``/``put_voice``/``delete_voice``/``voice_names``."""

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
        clean = name.strip()
        if not NAME_RE.match(clean):
            raise ValidationError(
                f"voice name {name[:40]!r} is not allowed: use 1-64 letters, digits, spaces, '.', '-' or '_', "
                "starting with a letter or digit"
            )
        return clean

    def save(self, name: str, prompt: PromptAudio, prompt_text: str) -> SavedVoice:
        name = self.check_name(name)
        voice = SavedVoice(name, prompt, prompt_text, time.time())
        record = {
            "flac": encode(prompt.pcm, PROMPT_SAMPLE_RATE, "flac"),
            "prompt_text": prompt_text,
            "created": voice.created,
            "fingerprint": prompt.fingerprint,
        }
        if self._store is None and self.shared is None:
            raise ValidationError("the voice library is unavailable (cache directory not writable); fix cache.dir")
        if self._store is not None:
            self._store.set(f"voice:{name}", record)
        if self.shared is not None:
            self.shared.put_voice(name, record)
        self._remember(voice)
        return voice

    def get(self, name: str) -> SavedVoice | None:
        with self._lock:
            remembered = self._memory.get(name)
        if remembered is not None and self._fresh(remembered[1]):
            return remembered[0]
        shared_get = self.shared.get_voice if self.shared is not None else None
        record = _read_tiers(self._store, f"voice:{name}", shared_get, name)
        if record is None:
            return None
        voice = _from_record(name, record)
        if voice is None:
            return None
        self._remember(voice)
        return voice

    def names(self) -> list[str]:
        found: set[str] = set()
        if self._store is not None:
            try:
                found.update(k[len("voice:") :] for k in self._store.iterkeys() if str(k).startswith("voice:"))
            except Exception as exc:
                _LOGGER.warning("cannot list voice library: %s", exc)
        if self.shared is not None:
            found.update(self.shared.voice_names())
        found.update(self._recalled())
        return sorted(found)

    def delete(self, name: str) -> bool:
        with self._lock:
            removed = self._memory.pop(name, None) is not None
        if self._store is not None:
            removed = bool(self._store.delete(f"voice:{name}")) or removed
        if self.shared is not None:
            removed = bool(self.shared.delete_voice(name)) or removed
        return removed


def _read_tiers(
    store: diskcache.Cache | None, local_key: str, shared_get: Callable[[str], Any] | None, shared_key: str
) -> Any:
    """The value from the local store, else from the shared tier; None if neither has it.
    A failing local store is logged and skipped, never raised."""
    value = None
    if store is not None:
        try:
            value = store.get(local_key)
        except Exception as exc:
            _LOGGER.warning("cannot read %s from the voice store: %s", local_key, exc)
    if value is None and shared_get is not None:
        value = shared_get(shared_key)
    return value


def _from_record(name: str, record: dict[str, Any]) -> SavedVoice | None:
    try:
        pcm, rate = decode_flac(record["flac"])
        if rate != PROMPT_SAMPLE_RATE:
            raise ValueError(f"sample rate {rate}")
        prompt = PromptAudio(np.ascontiguousarray(pcm, dtype=np.int16))
        if prompt.fingerprint != record.get("fingerprint", prompt.fingerprint):
            raise ValueError("fingerprint mismatch")
        prompt.pcm.setflags(write=False)
        return SavedVoice(name, prompt, str(record.get("prompt_text", "")), float(record.get("created", 0.0)))
    except Exception as exc:
        _LOGGER.warning("saved voice %r is damaged (%s); ignored", name, exc)
        return None


