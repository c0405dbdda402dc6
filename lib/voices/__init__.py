"""Voices: the engine's presets, the named voice library, and the voice-profile cache.

:class:`Voices` is what the rest of the service talks to: it finds a voice by name,
decodes and checks uploaded prompts, saves and deletes named voices, and hands the
engine the profile of a resolved request's voice.
"""

from __future__ import annotations

import builtins
import logging
import threading
from collections.abc import Mapping
from typing import Any

from lib.audio.pcm import PromptAudio, PromptDecoder
from lib.config import AppConfig
from lib.config.voicemap import OPENAI_VOICES
from lib.core.logtext import cut_text
from lib.core.reports import VoiceInfo
from lib.engines.base import Engine, VoiceProfile
from lib.errors import ConflictError, ConfusableNameError, NotFoundError, PromptAudioError, TTSError, ValidationError
from lib.request.access import Action, Caller, allows, check
from lib.request.types import PromptSource, Resolved
from lib.request.validate import check_prompt, check_text
from lib.voices.library import SavedVoice, VoiceLibrary, taken_message
from lib.voices.names import confusable_with, folded, mixed_scripts
from lib.voices.profiles import VoiceProfiles

__all__ = ["SavedVoice", "VoiceLibrary", "VoiceProfiles", "Voices"]

_LOGGER = logging.getLogger(__name__)


class Voices:
    """Presets, saved voices and profiles of one engine."""

    def __init__(
        self, engine: Engine, library: VoiceLibrary, profiles: VoiceProfiles, decoder: PromptDecoder, config: AppConfig
    ) -> None:
        self.engine = engine
        self.library = library
        self.profiles = profiles
        self.decoder = decoder
        self.config = config
        self._presets = frozenset(engine.presets())
        self._closed = threading.Event()

    # -- finding voices (lib.pipeline.resolve.VoiceBook) ----------------------------------------------

    def is_preset(self, name: str) -> bool:
        return name in self._presets

    def saved(self, name: str) -> SavedVoice | None:
        return self.library.get(name)

    def remembered(self, name: str) -> SavedVoice | None:
        return self.library.remembered(name)

    def names(self) -> list[str]:
        return [v["name"] for v in self._described()]

    def prompt(self, source: PromptSource, field: str = "prompt audio", *, remember: bool = True) -> PromptAudio:
        """Decode uploaded audio and check it is usable speech (``field`` names it in
        messages: prompt audio, or the source of a conversion). The decoded audio is
        memoised only if it is accepted and ``remember`` (the request may leave a trace)."""
        try:
            return self.decoder.decode(source, check=lambda p: check_prompt(p, self.config, field), remember=remember)
        except TTSError as exc:
            # The decoder speaks of "prompt audio"; a conversion's source is named as such.
            message = str(exc)
            if field == "prompt audio" or "prompt audio" not in message:
                raise
            raise type(exc)(message.replace("prompt audio", field, 1)) from exc

    def remembered_prompt(self, source: bytes) -> PromptAudio | None:
        """The prompt decoded (and accepted) from these very bytes before, without
        decoding them; None when it is not in memory."""
        return self.decoder.remembered(source)

    def profile(self, r: Resolved) -> VoiceProfile:
        """The engine's profile of ``r``'s voice (extracted once per voice). For a
        request that asked for no trace (bypass, ``store=false``) a new profile stays in
        memory: nothing of its prompt reaches the disk or the shared tier."""
        if r.preset is not None:
            return self.engine.preset_voice(r.preset)
        if r.prompt is None:
            raise ValidationError("no voice given; upload prompt audio or pick a voice")
        try:
            return self.profiles.get(r.prompt, r.fields.prompt_text, persist=r.use_cache and r.store)
        except PromptAudioError:
            self.decoder.discard(r.prompt)  # the engine refused it: do not keep it
            raise

    # -- the library ---------------------------------------------------------------------

    def list(self, *, caller: Caller) -> builtins.list[VoiceInfo]:
        """Preset and saved voices; the transcripts (users' texts) for callers allowed to
        read them, ``has_prompt_text`` for the others."""
        voices = self._described()
        if allows(caller, Action.READ_TEXTS):
            return voices
        public: builtins.list[VoiceInfo] = []
        for voice in voices:
            if "prompt_text" in voice:
                voice = voice.copy()
                voice["has_prompt_text"] = bool(voice.pop("prompt_text"))
            public.append(voice)
        return public

    def _described(self) -> builtins.list[VoiceInfo]:
        voices: builtins.list[VoiceInfo] = [{"name": n, "kind": "preset"} for n in sorted(self._presets)]
        for name in self.library.names():
            saved = self.library.get(name)
            if saved is not None:
                voices.append(saved.describe())
        return voices

    def save(
        self, name: str, prompt_audio: PromptSource | None, prompt_text: str = "", *,
        replace: bool = False, caller: Caller, consent: Mapping[str, Any] | None = None,
    ) -> VoiceInfo:  # fmt: skip
        """Save a prompt under ``name``; its profile is extracted now, so a prompt that
        cannot be a voice is refused at once and the first request in it is fast. A
        name that exists is refused (409) unless ``replace``, which needs the admin.
        ``consent``: the consent record it is made under (kept beside it)."""
        typed = name.strip()
        name = self.library.check_name(name)  # NFKC: the form that is compared and saved
        if self.is_preset(name) and name == typed:
            raise ValidationError(f"voice name {cut_text(name)!r} is a preset voice; choose another name")
        reserved = next((v for v in OPENAI_VOICES if folded(v) == folded(name)), None)
        if reserved is not None:  # /v1 speaks it in a preset: a saved one would answer /api/tts differently
            raise ConflictError(
                f"voice name {cut_text(typed)!r} is reserved: {reserved!r} is an OpenAI voice name, which "
                "/v1/audio/speech speaks in a preset (openai.voices); choose another name"
            )
        check(caller, Action.REPLACE_VOICE if replace else Action.SAVE_VOICE)
        self._refuse_look_alikes(typed, name)
        if not replace and self.library.exists(name):
            raise ConflictError(taken_message(name))
        if prompt_audio is None:
            raise ValidationError("prompt_audio: upload or record the voice to save")
        prompt = self.prompt(prompt_audio)
        clean_text = check_text(prompt_text, "prompt_text", self.config)
        try:
            self.profiles.get(prompt, clean_text if "zero_shot" in self.engine.modes else "")
        except PromptAudioError:
            self.decoder.discard(prompt)
            raise
        return self.library.save(name, prompt, clean_text, replace=replace, consent=consent).describe()

    def _refuse_look_alikes(self, typed: str, name: str) -> None:
        """Refuse a name that can pass for a preset or saved voice (lib.voices.names):
        mixed alphabets (422), or the skeleton of another voice's name (409, naming it)."""
        scripts = mixed_scripts(name)
        if scripts:
            raise ConfusableNameError(
                f"voice name {cut_text(typed)!r} mixes {' and '.join(scripts)} letters, which can pass for other "
                "names; write it in one alphabet (Chinese, Japanese or Korean characters may join it)"
            )
        others = [*sorted(self._presets), *self.library.names()]
        # Typed as another form of an existing name (fullwidth, a ligature): the same name.
        alike = name if name != typed and name in others else confusable_with(name, others)
        if alike is not None:
            kind = "preset" if alike in self._presets else "saved"
            raise ConflictError(
                f"voice name {cut_text(typed)!r} looks like the {kind} voice {alike!r} (confusable characters); "
                "choose a name that reads differently"
            )

    def delete(self, name: str, *, caller: Caller) -> None:
        check(caller, Action.DELETE_VOICE)
        if self.is_preset(name):
            raise ValidationError(f"voice {cut_text(name)!r} is a preset voice; presets cannot be deleted")
        if not self.library.delete(name):
            raise NotFoundError(f"no saved voice named {cut_text(name)!r}")

    def prewarm(self) -> None:
        """Load the profiles of all saved voices (at start, in a thread)."""
        for name in self.library.names():
            if self._closed.is_set():
                return
            saved = self.library.get(name)
            if saved is None:
                continue
            try:
                self.profiles.get(saved.prompt, saved.prompt_text)
            except Exception as exc:  # a damaged voice must not stop start-up
                _LOGGER.warning("could not prewarm voice %r: %s", cut_text(name), exc)

    def close(self) -> None:
        self._closed.set()
