"""Resolution of a request's voice and mode, and the fields its key is made of.

The rule: the key is computed from exactly what the engine will receive. Fields the
chosen mode does not use are blanked before keying, so they cannot split the cache.

:class:`Resolver` needs three things and gets only those: what the engine can do
(:class:`EngineInfo`), how to find a voice (:class:`VoiceBook`) and the configuration.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol

from lib.audio.pcm import PromptAudio
from lib.cache.keys import KeyFields, voice_id
from lib.compose.assemble import Finish
from lib.compose.segments import split
from lib.config import AppConfig
from lib.core.logtext import cut_text
from lib.engines.base import can_convert
from lib.errors import NotFoundError, ValidationError
from lib.request.types import CONVERT, ConvertRequest, Delivery, PromptSource, Resolved, TTSRequest
from lib.request.validate import check_delivery, check_request, check_seed, check_speed
from lib.takes.records import phrase_id

__all__ = ["EngineInfo", "ReadingKeys", "Resolver", "SavedPrompt", "VoiceBook"]


class EngineInfo(Protocol):
    """The engine as keys see it: who it is and which modes it serves."""

    @property
    def name(self) -> str: ...

    @property
    def model_version(self) -> str: ...

    @property
    def modes(self) -> frozenset[str]: ...

    @property
    def style_modes(self) -> frozenset[str]: ...


class SavedPrompt(Protocol):
    """A saved voice as resolution needs it."""

    @property
    def prompt(self) -> PromptAudio: ...

    @property
    def prompt_text(self) -> str: ...


class VoiceBook(Protocol):
    """Where voices come from: presets, saved voices and uploaded prompts."""

    def is_preset(self, name: str) -> bool: ...

    def saved(self, name: str) -> SavedPrompt | None: ...

    def remembered(self, name: str) -> SavedPrompt | None:
        """The saved voice from memory alone (no store or Redis read), or None."""
        ...

    def names(self) -> list[str]: ...

    def prompt(self, source: PromptSource, field: str = "prompt audio", *, remember: bool = True) -> PromptAudio:
        """Decode and check uploaded audio (``field`` names it in messages); keep it for
        later requests only when ``remember``."""
        ...

    def remembered_prompt(self, source: bytes) -> PromptAudio | None:
        """The uploaded prompt if these very bytes were decoded and accepted before (no
        decoding), else None."""
        ...


class ReadingKeys(Protocol):
    """What the key needs of the text front end (:class:`lib.readings.Readings`)."""

    @property
    def version(self) -> str:
        """Changes whenever :meth:`key_part` may answer differently (a lexicon edit)."""
        ...

    def key_part(self, text: str, voice: str | None = None) -> str:
        """The front end's version and the digest of the lexicon entries that apply to
        ``text`` in ``voice``: a term scan, microseconds."""
        ...


class Resolver:
    """Turns a :class:`TTSRequest` into a :class:`Resolved` (validated fields + key)."""

    def __init__(self, engine: EngineInfo, voices: VoiceBook, config: AppConfig, readings: ReadingKeys) -> None:
        self.engine = engine
        self.voices = voices
        self.config = config
        self.readings = readings
        """The key's reading part (issue 27): scoped by the voice as the caller named it."""
        self.finish = Finish.from_config(config)
        self._anywhere = _Anywhere(voices)
        self._in_memory = _InMemory(voices)
        self._presets: dict[tuple[object, ...], Resolved] = {}
        """Resolutions of recent requests in preset voices (``resolve_in_memory``):
        those depend on the request, the engine and the configuration alone."""

    def resolve(self, request: TTSRequest) -> Resolved:
        return self._resolve(request, self._anywhere)

    def resolve_in_memory(self, request: TTSRequest) -> Resolved | None:
        """:meth:`resolve` without any I/O, cheap enough for an event loop (the HTTP hit
        path): None when the request needs more than memory -- a prompt to decode (a
        path, an array, or bytes not decoded before), or a saved voice not in memory.
        Raises what :meth:`resolve` raises otherwise."""
        if request.prompt_audio is not None:
            # Never kept below: hashing the request would hash the whole recording.
            try:
                return self._resolve(request, self._in_memory)
            except _NotInMemory:
                return None
        # The types too: True == 1 and 1 == 1.0, but a check may refuse one and not the other.
        # The lexicon's version too: an edit re-keys the texts it affects.
        memo = (request, type(request.seed), type(request.speed), type(request.ttl), self.readings.version)
        try:
            known, hashable = self._presets.get(memo), True
        except TypeError:  # a field that cannot be hashed: resolved (and surely refused) every time
            known, hashable = None, False
        if known is not None:
            return known
        try:
            resolved = self._resolve(request, self._in_memory)
        except _NotInMemory:
            return None
        if hashable and resolved.preset is not None:  # a saved voice may be replaced: not kept
            if len(self._presets) >= _PRESET_MEMO:
                self._presets.clear()
            self._presets[memo] = resolved
        return resolved

    def _resolve(self, request: TTSRequest, find: _Finder) -> Resolved:
        c = check_request(request, self.config)
        prompt, preset, prompt_text = self._voice(request, c.prompt_text, find, c.delivery.leaves_trace)
        mode = self._mode(c.mode, request.voice, prompt, preset, prompt_text, c.style)
        style = c.style if mode in self.engine.style_modes else ""
        fields = KeyFields(
            engine=self.engine.name,
            model_version=self.engine.model_version,
            voice=voice_id(prompt.fingerprint if prompt is not None else None, preset),
            prompt_text=prompt_text if mode == "zero_shot" else "",
            text=c.text,
            style=style,
            seed=c.seed,
            speed=c.speed,
            mode=mode,
            finish=self._recipe(c.text, style),
            reading=self._reading(c.text, request.voice),
        )
        return self._resolved(request, c.delivery, fields, prompt, preset, phrase=phrase_id(fields), seeded=c.seeded)

    def _reading(self, text: str, voice: str | None) -> str:
        """The key's reading part: the voice scope is the voice as the caller named it
        (a preset or saved voice), none for an uploaded prompt."""
        return self.readings.key_part(text, voice.strip() if voice else None)

    def part(self, r: Resolved, text: str) -> Resolved:
        """The raw request for one segment or piece of ``r``: only the text (and so its
        reading part) differs, and nothing is finished."""
        fields = dataclasses.replace(r.fields, text=text, finish="", reading=self._reading(text, r.voice_name))
        return dataclasses.replace(r, fields=fields, key=fields.key, phrase=phrase_id(fields))

    @staticmethod
    def _resolved(
        request: TTSRequest | ConvertRequest, delivery: Delivery, fields: KeyFields, prompt: PromptAudio | None,
        preset: str | None, source: PromptAudio | None = None, *, phrase: str = "", seeded: bool = True,
    ) -> Resolved:  # fmt: skip
        """The key fields and the checked delivery settings (both modes alike); ``phrase``
        and ``seeded`` for a synthesis (lib.takes)."""
        return Resolved(
            fields=fields,
            key=fields.key,
            prompt=prompt,
            preset=preset,
            voice_name=request.voice.strip() if request.voice else "",
            source=source,
            phrase=phrase,
            seeded=seeded,
            request=request,
            **vars(delivery),
        )

    def _recipe(self, text: str, style: str = "") -> str:
        """The key's ``finish`` field: "" when the answer is the engine's audio untouched
        (one segment, no tail, no loudness target: the key it had before segments),
        else the assembly recipe (with the level ``style`` asks for, if any). Only that
        case needs the text split."""
        if self.finish.identity and len(split(text, self.finish.max_chars)) == 1:
            return ""
        return self.finish.recipe_for(style)

    def resolve_convert(self, request: ConvertRequest) -> Resolved:
        """Convert mode: keyed on the source recording's fingerprint, the target voice,
        seed, speed, engine and model version (the text field holds the source)."""
        if not can_convert(self.engine):
            raise ValidationError(
                f"mode: the {self.engine.name} engine cannot convert recordings; use the builtin or cosyvoice engine"
            )
        if request.source_audio is None:
            raise ValidationError("source_audio: upload or record the recording to convert")
        delivery = check_delivery(request, self.config)
        remember = delivery.leaves_trace  # a no-trace request leaves none of its audio
        source = self.voices.prompt(request.source_audio, field="source_audio", remember=remember)
        prompt, preset, _ = self._voice(request, "", self._anywhere, remember)
        fields = KeyFields(
            engine=self.engine.name,
            model_version=self.engine.model_version,
            voice=voice_id(prompt.fingerprint if prompt is not None else None, preset),
            prompt_text="",
            text=f"source:{source.fingerprint}",
            style="",
            seed=check_seed(request.seed),
            speed=round(check_speed(request.speed), 3),
            mode=CONVERT,
        )
        return self._resolved(request, delivery, fields, prompt, preset, source)

    def _voice(
        self, request: TTSRequest | ConvertRequest, prompt_text: str, find: _Finder, remember: bool
    ) -> tuple[PromptAudio | None, str | None, str]:
        if request.voice and request.prompt_audio is not None:
            raise ValidationError("give either prompt_audio or voice, not both")
        if request.voice:
            name = request.voice.strip()
            # Presets first: a set lookup, where the library may ask its store (and Redis).
            # Saving a voice under a preset's name is refused, so the order changes nothing.
            if self.voices.is_preset(name):
                return None, name, prompt_text
            saved = find.saved(name)
            if saved is None:
                known = ", ".join(cut_text(n) for n in self.voices.names()) or "none"
                raise NotFoundError(f"voice: no saved or preset voice named {cut_text(name)!r}; available: {known}")
            return saved.prompt, None, prompt_text or saved.prompt_text
        if request.prompt_audio is not None:
            # A request that asked for no trace leaves none of its prompt behind.
            return find.prompt(request.prompt_audio, remember), None, prompt_text
        raise ValidationError("no voice: upload or record prompt audio, or give the name of a saved or preset voice")

    def _mode(
        self, mode: str | None, voice: str | None, prompt: PromptAudio | None, preset: str | None, prompt_text: str,
        style: str,
    ) -> str:  # fmt: skip
        engine = self.engine
        if mode == "preset" and prompt is not None and voice:
            mode = None  # a saved voice picked in preset mode behaves like its prompt
        if mode is None:
            mode = self._auto_mode(preset is not None, bool(prompt_text), bool(style))
        if mode not in engine.modes:
            raise ValidationError(
                f"mode: the {engine.name} engine does not support {mode}; use one of {', '.join(sorted(engine.modes))}"
            )
        if mode == "preset" and preset is None:
            raise ValidationError("mode: preset needs a preset voice name in voice; pick one from the voice list")
        if mode in ("zero_shot", "cross_lingual") and prompt is None:
            raise ValidationError(f"mode: {mode} clones a prompt voice; upload prompt audio or pick a saved voice")
        if mode == "zero_shot" and not prompt_text:
            raise ValidationError("prompt_text: zero_shot mode needs the transcript of the prompt audio")
        if mode == "instruct" and not style:
            raise ValidationError("style: instruct mode needs a style instruction, e.g. 'slow and calm'")
        return mode

    def _auto_mode(self, is_preset: bool, has_prompt_text: bool, has_style: bool) -> str:
        engine = self.engine
        if is_preset:
            if has_style and "preset" not in engine.style_modes and "instruct" in engine.modes:
                return "instruct"
            return "preset"
        if has_style and "instruct" in engine.modes and not ({"zero_shot", "cross_lingual"} & engine.style_modes):
            return "instruct"
        return "zero_shot" if has_prompt_text else "cross_lingual"


#: Preset-voice resolutions kept for the hit path (a few MB at most, texts included).
_PRESET_MEMO = 1024


class _NotInMemory(Exception):
    """A voice that only a store read or a decode could find (``resolve_in_memory``)."""


class _Finder(Protocol):
    """Where :meth:`Resolver._voice` finds a saved voice and an uploaded prompt."""

    def saved(self, name: str) -> SavedPrompt | None: ...

    def prompt(self, source: PromptSource, remember: bool) -> PromptAudio: ...


class _Anywhere:
    """The voice book as it is: saved voices from memory, the store or Redis; uploaded
    prompts decoded (once: the decoder remembers them)."""

    def __init__(self, voices: VoiceBook) -> None:
        self.voices = voices

    def saved(self, name: str) -> SavedPrompt | None:
        return self.voices.saved(name)

    def prompt(self, source: PromptSource, remember: bool) -> PromptAudio:
        return self.voices.prompt(source, remember=remember)


class _InMemory:
    """Memory alone: what is not there raises :class:`_NotInMemory` (never a "not found"
    concluded from memory)."""

    def __init__(self, voices: VoiceBook) -> None:
        self.voices = voices

    def saved(self, name: str) -> SavedPrompt:
        found = self.voices.remembered(name)
        if found is None:
            raise _NotInMemory(name)
        return found

    def prompt(self, source: PromptSource, remember: bool) -> PromptAudio:
        # Raw bytes only: a path needs a stat, an array a hash of its samples.
        found = self.voices.remembered_prompt(source) if isinstance(source, bytes) else None
        if found is None:
            raise _NotInMemory("prompt audio")
        return found
