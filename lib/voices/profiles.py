"""The voice-profile cache: what an engine extracts from prompt audio (the expensive,
cacheable part), keyed by (prompt fingerprint, prompt text, engine, model version),
kept in an in-memory LRU bounded in bytes and persisted in a private diskcache (and
the shared tier), so a voice is analysed once, not once per request or per restart.

Profiles are derived data: their store (``<cache.dir>/profiles``) is bounded by
``voices.profile_bytes`` (least recently used out) and emptied by clear. The profile of
a request that asked for no trace (``store=false``, a bypass) stays in memory only.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable

from lib.audio.pcm import PromptAudio
from lib.cache.handle import DiskHandle
from lib.cache.lru import ByteLRU
from lib.engines.base import Engine, VoiceProfile
from lib.voices.tiers import SharedVoices, read_tiers

__all__ = ["VoiceProfiles"]

_LOGGER = logging.getLogger(__name__)


class VoiceProfiles:
    """Profile cache in front of ``engine.extract_voice``; concurrent requests for the
    same new voice extract it once."""

    def __init__(
        self,
        engine: Engine,
        store: DiskHandle | None,
        memory_bytes: int,
        on_extract: Callable[[], None] = lambda: None,
        shared: SharedVoices | None = None,
    ) -> None:
        self.engine = engine
        self._store = store
        """Its own store, not the voice library's: bounded and evicted, unlike saved voices."""
        self._memory: ByteLRU[str, VoiceProfile] = ByteLRU(memory_bytes, lambda p: p.nbytes)
        self._on_extract = on_extract
        self._unsaved: set[str] = set()
        """Keys of profiles held in memory only (made for a request that asked for no
        trace); a later request that may leave one saves them."""
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self.shared = shared

    def key(self, fingerprint: str, prompt_text: str) -> str:
        raw = f"{self.engine.name}\x00{self.engine.model_version}\x00{fingerprint}\x00{prompt_text}"
        return hashlib.md5(raw.encode("utf-8")).hexdigest()

    @property
    def store(self) -> DiskHandle | None:
        """The disk store the profiles are kept in (bounded, evicted)."""
        return self._store

    def get(self, prompt: PromptAudio, prompt_text: str, *, persist: bool = True) -> VoiceProfile:
        """The profile for this prompt, extracting it only if no tier has it. A new
        profile is written to disk and the shared tier only when ``persist``."""
        key = self.key(prompt.fingerprint, prompt_text)
        found = self._lookup(key)
        if found is not None and (not persist or key not in self._unsaved):
            return found
        with self._lock_for(key):
            found = self._lookup(key)
            if found is not None:
                if persist and key in self._unsaved:
                    self._save(key, found)
                return found
            started = time.perf_counter()
            profile = self.engine.extract_voice(prompt.pcm, prompt_text)
            self._on_extract()
            _LOGGER.info("extracted voice %s in %.0f ms", prompt.fingerprint[:8], (time.perf_counter() - started) * 1e3)
            self._memory.put(key, profile)
            if persist:
                self._save(key, profile)
            else:
                self._unsaved.add(key)
            return profile

    def _save(self, key: str, profile: VoiceProfile) -> None:
        self._unsaved.discard(key)
        blob = profile.to_bytes()
        if self._store is not None:
            with self._store.using("put", write=True) as cache:
                if cache is not None:
                    cache.set(f"profile:{key}", blob)
        if self.shared is not None:
            self.shared.put_profile(key, blob)

    def clear(self) -> int:
        """Drop every profile from memory, disk and the shared tier; return how many
        were on disk. They are extracted again when a voice is next used."""
        self._memory.clear()
        self._unsaved.clear()
        removed = 0
        if self._store is not None:
            with self._store.using("clear profiles", write=True) as cache:
                removed = int(cache.clear()) if cache is not None else 0
        if self.shared is not None:
            self.shared.clear_profiles()
        return removed

    def _lookup(self, key: str) -> VoiceProfile | None:
        found = self._memory.get(key)
        if found is not None:
            return found
        shared_get = self.shared.get_profile if self.shared is not None else None
        blob = read_tiers(self._store, f"profile:{key}", shared_get, key)
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
