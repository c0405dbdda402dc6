"""Resolution of a request's voice and mode, and the fields its key is made of.

The rule: the key is computed from exactly what the engine will receive. Fields the
chosen mode does not use are blanked before keying, so they cannot split the cache.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lib.audio import PromptAudio
from lib.errors import NotFoundError, ValidationError
from lib.keys import KeyFields, cache_key
from lib.request import Resolved, TTSRequest, check_prompt

if TYPE_CHECKING:
    from lib.service import TTSService

__all__ = ["resolve_request"]


def resolve_request(request: TTSRequest, service: TTSService, text: str, prompt_text: str, style: str) -> Resolved:
    engine = service.engine
    prompt: PromptAudio | None = None
    preset: str | None = None
    if request.voice and request.prompt_audio is not None:
        raise ValidationError("give either prompt_audio or voice, not both")
    if request.voice:
        name = request.voice.strip()
        # Presets first: a set lookup, where the library may ask its store (and Redis).
        # Saving a voice under a preset's name is refused, so the order changes nothing.
        if service.is_preset(name):
            preset = name
        else:
            saved = service.library.get(name)
            if saved is None:
                known = ", ".join(v["name"] for v in service.list_voices()) or "none"
                raise NotFoundError(f"voice: no saved or preset voice named {name!r}; available: {known}")
            prompt = saved.prompt
            prompt_text = prompt_text or saved.prompt_text
    elif request.prompt_audio is not None:
        prompt = service.decoder.decode(request.prompt_audio)
        check_prompt(prompt, service.config)
    else:
        raise ValidationError("no voice: upload or record prompt audio, or give the name of a saved or preset voice")

    mode = request.mode
    if mode == "preset" and prompt is not None and request.voice:
        mode = None  # a saved voice picked in preset mode behaves like its prompt
    if mode is None:
        mode = _auto_mode(service, preset is not None, bool(prompt_text), bool(style))
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
    if mode != "zero_shot":
        prompt_text = ""
    if mode not in engine.style_modes:
        style = ""
    voice_id = prompt.fingerprint if prompt is not None else f"preset:{preset}"
    fields = KeyFields(
        engine=engine.name,
        model_version=engine.model_version,
        voice=voice_id,
        prompt_text=prompt_text,
        text=text,
        style=style,
        seed=int(request.seed),
        speed=round(float(request.speed), 3),
        mode=mode,
    )
    return Resolved(
        fields=fields,
        key=cache_key(fields),
        prompt=prompt,
        preset=preset,
        format=request.format,
        use_cache=bool(request.use_cache),
        store=bool(request.store),
        ttl=request.ttl,
    )


def _auto_mode(service: TTSService, is_preset: bool, has_prompt_text: bool, has_style: bool) -> str:
    engine = service.engine
    if is_preset:
        if has_style and "preset" not in engine.style_modes and "instruct" in engine.modes:
            return "instruct"
        return "preset"
    if has_style and "instruct" in engine.modes and not ({"zero_shot", "cross_lingual"} & engine.style_modes):
        return "instruct"
    return "zero_shot" if has_prompt_text else "cross_lingual"
