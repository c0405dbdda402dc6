"""The convert mode (变声, speech to speech) of the Synthesise tab: its form -> a
:class:`ConvertRequest`, and the form's problems by field, with the service's own rules.

The mode is offered only when the engine can convert (:func:`can_convert`). Its form is
the source recording, the target voice (an uploaded or recorded prompt, or a preset or
saved voice from the list) and seed, speed, format and cache; the text, transcript and
style are hidden, since a conversion speaks the source's words. It is its own event
(``/convert``), so the Synthesise event and its API keep their inputs.

The prompt decoder words its refusals as "prompt audio ..." whatever it decodes; the
source is therefore checked alone first (:func:`check_source`), so that a source that
is too long or unreadable is named as the source, never as the target voice.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from typing import Any

from lib.engines.base import can_convert
from lib.errors import TTSError, ValidationError
from lib.pipeline.service import TTSService
from lib.request.messages import FieldErrors, UIMessage
from lib.request.types import ConvertRequest, PromptSource
from lib.request.validate import check_speed
from lib.ui.forms import Resolutions, form_seed

__all__ = ["CONVERT_FIELDS", "build_convert_request", "can_convert", "check_source", "convert_errors"]

_LOGGER = logging.getLogger(__name__)

#: The inputs of the Convert event, in order (the validator answers one per input).
CONVERT_FIELDS = ("source_audio", "prompt_audio", "voice", "seed", "speed", "format", "use_cache")

_DECODER_WORDS = re.compile(r"^(?:prompt audio|source_audio)\b")


def build_convert_request(
    source: str | None, prompt_audio: str | None, voice: str | None, seed: Any, speed: Any, fmt: str, use_cache: Any
) -> ConvertRequest:
    """The form as a request: the uploaded target recording when there is one, else the
    voice picked in the list (a preset or a saved voice)."""
    if not source:
        raise ValidationError("source_audio: upload or record the recording to convert")
    name = (voice or "").strip() or None
    if prompt_audio:
        name = None
    elif name is None:
        raise ValidationError("prompt audio: upload or record the target voice, or pick a preset or saved voice")
    return ConvertRequest(
        source_audio=source, prompt_audio=prompt_audio or None, voice=name,
        seed=form_seed(seed) or 0, speed=check_speed(speed), format=fmt, use_cache=bool(use_cache),
    )  # fmt: skip


def check_source(service: TTSService, source: PromptSource) -> None:
    """Decode and check the source recording alone (the service's rules: length,
    silence, size, decodable), raising its problem as the source's. Nothing is kept."""
    try:
        service.voices.prompt(source, field="source audio", remember=False)
    except TTSError as exc:
        raise type(exc)(_DECODER_WORDS.sub("source audio", str(exc), count=1)) from exc


def convert_errors(
    service: TTSService, form: Sequence[Any], resolutions: Resolutions | None = None
) -> dict[str, UIMessage]:  # fmt: skip
    """Every problem of the form ``(source, prompt_audio, voice, seed, speed, fmt,
    use_cache)`` by field: the fields that stand alone first, then the request as a
    whole (the target voice and the engine), resolved exactly as the service will.
    ``resolutions`` as for :func:`lib.ui.forms.form_errors`."""
    if resolutions is not None and resolutions.get(form) is not None:
        return {}
    source, prompt_audio, voice, seed, speed, fmt, use_cache = form
    errors = FieldErrors(CONVERT_FIELDS, paths=[source, prompt_audio])
    attempt = errors.attempt
    attempt("seed", lambda: form_seed(seed))
    attempt("speed", lambda: check_speed(speed))
    values = (source, prompt_audio, voice, seed, speed, fmt, use_cache)
    if source:
        attempt("source_audio", lambda: check_source(service, source))
    else:
        attempt("source_audio", lambda: build_convert_request(*values))
    if not errors:

        def resolve() -> None:
            resolved = service.resolve(build_convert_request(*values))
            if resolutions is not None:
                resolutions.keep(form, resolved)

        attempt("source_audio", resolve)
    if errors:
        _LOGGER.debug("convert form refused: %s", sorted(errors))
    return dict(errors)
