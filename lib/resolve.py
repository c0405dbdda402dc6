"""Resolution of a request's voice and mode, and the fields its key is made of.

The rule: the key is computed from exactly what the engine will receive. Fields the
chosen mode does not use are blanked before keying, so they cannot split the cache.

:class:`Resolver` needs three things and gets only those: what the engine can do
(:class:`EngineInfo`), how to find a voice (:class:`VoiceBook`) and the configuration.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from lib.audio import PromptAudio
from lib.cache.keys import KeyFields, voice_id
from lib.compose.assemble import Finish
from lib.compose.segments import split
from lib.config import AppConfig
from lib.engines.base import can_convert
from lib.errors import NotFoundError, ValidationError
from lib.request import CONVERT, ConvertRequest, PromptSource, Resolved, TTSRequest
from lib.textnorm import cut_text
from lib.validate import check_format, check_seed, check_speed, check_ttl, normalise_fields

__all__ = ["EngineInfo", "Resolver", "SavedPrompt", "VoiceBook"]


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


class Resolver:
    """Turns a :class:`TTSRequest` into a :class:`Resolved` (validated fields + key)."""

    def __init__(self, engine: EngineInfo, voices: VoiceBook, config: AppConfig) -> None:
        self.engine = engine
        self.voices = voices
        self.config = config
        self.finish = Finish.from_config(config)
        self._presets: dict[tuple[object, ...], Resolved] = {}
        """Resolutions of recent requests in preset voices (``resolve_in_memory``):
        those depend on the request, the engine and the configuration alone."""

    def resolve(self, request: TTSRequest) -> Resolved:
        return self._resolve(request, self.voices.saved)

    def resolve_in_memory(self, request: TTSRequest) -> Resolved | None:
        """:meth:`resolve` without any I/O, cheap enough for an event loop (the HTTP hit
        path): None when the request needs more than memory -- a prompt to decode, or a
        saved voice not in memory. Raises what :meth:`resolve` raises otherwise."""
        if request.prompt_audio is not None:
            return None
        # The types too: True == 1 and 1 == 1.0, but a check may refuse one and not the other.
        memo = (request, type(request.seed), type(request.speed), type(request.ttl))
        try:
            known, hashable = self._presets.get(memo), True
        except TypeError:  # a field that cannot be hashed: resolved (and surely refused) every time
            known, hashable = None, False
        if known is not None:
            return known
        try:
            resolved = self._resolve(request, self._remembered)
        except _NotInMemory:
            return None
        if hashable and resolved.preset is not None:  # a saved voice may be replaced: not kept
            if len(self._presets) >= _PRESET_MEMO:
                self._presets.clear()
            self._presets[memo] = resolved
        return resolved

    def _remembered(self, name: str) -> SavedPrompt:
        found = self.voices.remembered(name)
        if found is None:
            raise _NotInMemory(name)
        return found

    def _resolve(self, request: TTSRequest, saved: Callable[[str], SavedPrompt | None]) -> Resolved:
        text, prompt_text, style = normalise_fields(request, self.config)
        prompt, preset, prompt_text = self._voice(request, prompt_text, saved)
        mode = self._mode(request, prompt, preset, prompt_text, style)
        if mode != "zero_shot":
            prompt_text = ""
        if mode not in self.engine.style_modes:
            style = ""
        fields = KeyFields(
            engine=self.engine.name,
            model_version=self.engine.model_version,
            voice=voice_id(prompt.fingerprint if prompt is not None else None, preset),
            prompt_text=prompt_text,
            text=text,
            style=style,
            seed=check_seed(request.seed),
            speed=round(check_speed(request.speed), 3),
            mode=mode,
            finish=self._recipe(text, style),
        )
        return self._resolved(request, fields, prompt, preset)

    def _resolved(
        self, request: TTSRequest | ConvertRequest, fields: KeyFields, prompt: PromptAudio | None, preset: str | None,
        source: PromptAudio | None = None,
    ) -> Resolved:  # fmt: skip
        """The request's delivery settings around its key fields (both modes alike)."""
        ttl = check_ttl(request.ttl)
        return Resolved(
            fields=fields,
            key=fields.key,
            prompt=prompt,
            preset=preset,
            voice_name=request.voice.strip() if request.voice else "",
            format=request.format,
            use_cache=bool(request.use_cache),
            store=bool(request.store),
            ttl=ttl if ttl is not None else self.config.cache.ttl,
            source=source,
            origin="preload" if request.origin == "preload" else "user",
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
        check_format(request.format)
        remember = bool(request.use_cache and request.store)  # a no-trace request leaves none of its audio
        source = self.voices.prompt(request.source_audio, field="source_audio", remember=remember)
        prompt, preset, _ = self._voice(request, "", self.voices.saved)
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
        return self._resolved(request, fields, prompt, preset, source)

    def _voice(
        self, request: TTSRequest | ConvertRequest, prompt_text: str, find: Callable[[str], SavedPrompt | None]
    ) -> tuple[PromptAudio | None, str | None, str]:
        if request.voice and request.prompt_audio is not None:
            raise ValidationError("give either prompt_audio or voice, not both")
        if request.voice:
            name = request.voice.strip()
            # Presets first: a set lookup, where the library may ask its store (and Redis).
            # Saving a voice under a preset's name is refused, so the order changes nothing.
            if self.voices.is_preset(name):
                return None, name, prompt_text
            saved = find(name)
            if saved is None:
                known = ", ".join(cut_text(n) for n in self.voices.names()) or "none"
                raise NotFoundError(f"voice: no saved or preset voice named {cut_text(name)!r}; available: {known}")
            return saved.prompt, None, prompt_text or saved.prompt_text
        if request.prompt_audio is not None:
            # A request that asked for no trace leaves none of its prompt behind.
            remember = bool(request.use_cache and request.store)
            return self.voices.prompt(request.prompt_audio, remember=remember), None, prompt_text
        raise ValidationError("no voice: upload or record prompt audio, or give the name of a saved or preset voice")

    def _mode(
        self, request: TTSRequest, prompt: PromptAudio | None, preset: str | None, prompt_text: str, style: str
    ) -> str:
        engine = self.engine
        mode = request.mode
        if mode == "preset" and prompt is not None and request.voice:
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
    """A saved voice that only a store read could find (``resolve_in_memory``)."""
