"""Hot-phrase lists (``hot_phrases.json``): schema, validation, expansion and preload.

A list names its voices once and then its phrases::

    {
      "version": 1,
      "voices": {
        "desk":  {"preset": "zh-female"},
        "clone": {"prompt_audio": "voices/desk.wav", "prompt_text": "希望你以后能够做的比我还好呦。"}
      },
      "phrases": [
        {"text": "欢迎光临！", "voice": "desk"},
        {"text": "请A023号顾客到3号窗口办理业务", "voice": "desk", "seeds": [0, 1]},
        {"text": "Mind the gap.", "voice": "clone", "styles": ["", "slow, calm"], "speed": 0.9}
      ]
    }

A phrase may name its ``mode`` (``preset``, ``zero_shot``, ``cross_lingual`` or
``instruct``; without one it is picked from the voice and style as for any request):
``{"text": "欢迎光临！", "voice": "desk", "mode": "instruct", "style": "开心"}`` preloads the
very request the UI's instruct mode makes (an instruct phrase needs a style).

A voice is either ``preset`` (a preset voice of the engine, or a voice saved in the voice
library) or ``prompt_audio`` (a path relative to the list file) with an optional
``prompt_text`` (its transcript; without one the voice is cloned cross-lingually). A
list may only reference recordings inside its own folder or ``preload.prompt_dir``
(:class:`PhraseRules`); any other path (absolute elsewhere, ``..``, a symlink out) is
refused with the same message as a missing file, so a list cannot probe the server's
files. A list expands to at most ``preload.max_requests`` requests. A
phrase has ``text`` and ``voice``, and optionally ``style``, ``seed``, ``speed``, and the
lists ``seeds`` and ``styles``, which expand the phrase into one request per seed and
style (their product when both are given). A phrase without ``seed`` is answered its
approved take when it has one, else seed 0 (:mod:`lib.takes`); ``take`` (written by
*Export top phrases* beside an approved seed) is the digest of the approved take's
samples, so that the preload reports a rebuilt take that differs. Every error names the
entry and the field.

:func:`lib.batch.preload.preload` runs the expanded requests through the service, skipping
what is cached; it is used by ``preload_cache.py`` and the web UI's Preload tab.
"""

from __future__ import annotations

import itertools
import json
import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lib.config import PreloadConfig
from lib.core.logtext import cut_text
from lib.errors import ValidationError
from lib.request.types import TTSRequest
from lib.request.validate import MAX_SEED, MAX_SPEED, MIN_SPEED, check_seed, check_speed

__all__ = [
    "MAX_FILE_BYTES",
    "PHRASE_MODES",
    "SCHEMA_VERSION",
    "PhraseFileError",
    "PhraseRequest",
    "PhraseRules",
    "VoiceSpec",
    "check_list_seed",
    "check_list_speed",
    "expand",
    "load_phrases",
    "parse_phrases",
    "parse_voices",
    "read_phrase_file",
]

_LOGGER = logging.getLogger(__name__)

SCHEMA_VERSION = 1
_TOP_KEYS = {"version", "voices", "phrases", "templates"}  # templates: lib.compose.templates
_VOICE_KEYS = {"preset", "prompt_audio", "prompt_text"}
_PHRASE_KEYS = {"text", "voice", "style", "seed", "speed", "seeds", "styles", "take", "mode"}
#: The modes a phrase may name (convert is not a phrase: it speaks a recording).
PHRASE_MODES = ("preset", "zero_shot", "cross_lingual", "instruct")


#: Largest phrase file read (a list of 10,000 phrases is about 1 MB).
MAX_FILE_BYTES = 16 * 1024**2


class PhraseFileError(ValidationError):
    """The phrase list is not valid; the message names the entry and the field."""


@dataclass(frozen=True)
class PhraseRules:
    """What a phrase list may ask for (``preload:`` in config.yaml)."""

    max_requests: int = 10_000
    """Most requests the list may expand to (``preload.max_requests``)."""
    prompt_dir: str | None = None
    """A folder of recordings any list may reference (``preload.prompt_dir``)."""
    own_folder: bool = True
    """Whether the list's own folder holds recordings it may use: true for a list on
    the server, false for an uploaded one (its folder is the upload area)."""

    @classmethod
    def from_config(cls, config: PreloadConfig, *, own_folder: bool = True) -> PhraseRules:
        return cls(config.max_requests, config.prompt_dir, own_folder)

    def roots(self, base_dir: Path) -> list[Path]:
        """The folders whose recordings the list may use."""
        roots = [base_dir] if self.own_folder else []
        if self.prompt_dir is not None:
            roots.append(Path(self.prompt_dir))
        return roots

    def path_rule(self) -> str:
        """The end of the one message for a path the list may not use."""
        if self.own_folder:
            where = "the phrase list's folder" + (" or preload.prompt_dir" if self.prompt_dir else "")
            return f"is not an audio file inside {where}; give a path relative to the list"
        if self.prompt_dir:
            return (
                "is not an audio file inside preload.prompt_dir (an uploaded list may only use recordings "
                "there); give a path relative to that folder, or use a preset or saved voice"
            )
        return (
            "cannot be used: an uploaded list may only use recordings in preload.prompt_dir, and none is "
            "configured; use a preset or saved voice instead"
        )


@dataclass(frozen=True, kw_only=True)
class VoiceSpec:
    """How a list says to speak: one of its voices (a preset or saved voice by name, or
    a recording and its transcript) and the settings. What a phrase and a template
    share (:class:`PhraseRequest`, :class:`lib.compose.templates.Template`)."""

    voice: str | None = None
    """A preset or saved voice, by name."""
    prompt_audio: str | None = None
    """A recording, by its real path (confined by :class:`PhraseRules`)."""
    prompt_text: str = ""
    style: str = ""
    seed: int | None = None
    """None: the phrase names no seed (its approved take, else seed 0: lib.takes)."""
    speed: float = 1.0

    def speaking(self, text: str, *, use_cache: bool = True, origin: str = "user") -> TTSRequest:
        """The request for ``text`` in this voice and these settings."""
        return TTSRequest(
            text=text, voice=self.voice, prompt_audio=self.prompt_audio, prompt_text=self.prompt_text,
            style=self.style, seed=self.seed, speed=self.speed, use_cache=use_cache, origin=origin,
        )  # fmt: skip


@dataclass(frozen=True)
class PhraseRequest(VoiceSpec):
    """One request after expansion, ready to become a :class:`TTSRequest`."""

    entry: str
    """Where it came from, e.g. ``phrases[3]`` (for messages)."""
    text: str
    take: str = ""
    """The digest of the approved take's samples (``lib.takes.records.pcm_digest``), "" for none."""
    mode: str = ""
    """One of :data:`PHRASE_MODES`, or "" (picked from the voice and style)."""

    def request(self, *, use_cache: bool = True) -> TTSRequest:
        request = self.speaking(self.text, use_cache=use_cache, origin="preload")
        return replace(request, mode=self.mode) if self.mode else request


def load_phrases(path: str | Path, rules: PhraseRules | None = None) -> list[PhraseRequest]:
    """Read, validate and expand a phrase file. Raises :class:`PhraseFileError`."""
    file = Path(path)
    return parse_phrases(read_phrase_file(file), base_dir=file.resolve().parent, source=str(file), rules=rules)


def read_phrase_file(path: str | Path) -> Any:
    """The decoded JSON of a phrase file (size, encoding and syntax checked); the
    phrases and the templates (:mod:`lib.compose.templates`) are read from it."""
    file = Path(path)
    try:
        if file.stat().st_size > MAX_FILE_BYTES:
            raise PhraseFileError(
                f"{file}: the phrase file is over {MAX_FILE_BYTES // 1024**2} MB; split it into several lists"
            )
        raw = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise PhraseFileError(f"{file}: cannot read the phrase file ({exc.strerror or exc})") from exc
    except UnicodeDecodeError as exc:
        raise PhraseFileError(f"{file}: the phrase file is not UTF-8 text (byte {exc.start})") from exc
    try:
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        raise PhraseFileError(f"{file}: not valid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}") from exc


def parse_phrases(
    data: Any, *, base_dir: Path, source: str = "phrases", rules: PhraseRules | None = None
) -> list[PhraseRequest]:
    """Validate a decoded phrase document and expand it into requests."""
    rules = rules or PhraseRules()
    if not isinstance(data, dict):
        raise PhraseFileError(f'{source}: the top level must be an object with "voices" and "phrases"')
    _unknown(data, _TOP_KEYS, source, "top level")
    version = data.get("version", SCHEMA_VERSION)
    if version != SCHEMA_VERSION:
        raise PhraseFileError(f'{source}: field "version": must be {SCHEMA_VERSION}, got {version!r}')
    voices = parse_voices(data, base_dir=base_dir, source=source, rules=rules)
    phrases_raw = data.get("phrases", [] if "templates" in data else None)
    if not isinstance(phrases_raw, list) or not (phrases_raw or "templates" in data):
        raise PhraseFileError(f'{source}: field "phrases": must be a non-empty list of phrase objects')
    out: list[PhraseRequest] = []
    for i, spec in enumerate(phrases_raw):
        # Counted before expanding: seeds x styles could otherwise be billions of requests.
        if len(out) + _expansion(spec) > rules.max_requests:
            raise PhraseFileError(
                f"{source}: phrases[{i}]: the list expands to more than {rules.max_requests} requests "
                "(preload.max_requests; every seed times every style of a phrase is one request); "
                "split it into several lists or use fewer seeds and styles"
            )
        out.extend(_phrase(f"phrases[{i}]", spec, voices, source))
    return out


def _expansion(spec: Any) -> int:
    """How many requests a phrase entry asks for (its seeds times its styles)."""
    n = 1
    if isinstance(spec, dict):
        for many in ("seeds", "styles"):
            value = spec.get(many)
            if isinstance(value, list):
                n *= max(1, len(value))
    return n


def parse_voices(
    data: Mapping[str, Any], *, base_dir: Path, source: str = "phrases", rules: PhraseRules | None = None
) -> dict[str, VoiceSpec]:
    """The ``voices`` of a decoded phrase document, validated (phrases and templates
    name them; prompt paths confined by ``rules``)."""
    rules = rules or PhraseRules()
    voices_raw = data.get("voices")
    if not isinstance(voices_raw, dict) or not voices_raw:
        raise PhraseFileError(f'{source}: field "voices": must be an object naming at least one voice')
    roots, rule = rules.roots(base_dir), rules.path_rule()
    return {name: _voice(name, spec, roots, rule, source) for name, spec in voices_raw.items()}


def expand(requests: Iterable[PhraseRequest]) -> list[PhraseRequest]:
    """Drop exact duplicates, keeping order (two entries may expand to the same request)."""
    seen: set[PhraseRequest] = set()
    unique: list[PhraseRequest] = []
    for r in requests:
        if r not in seen:
            seen.add(r)
            unique.append(r)
    return unique


def check_list_seed(value: Any, at: str, field: str) -> int:
    """A seed given in a list (``at``: where; ``field``: the field as the message quotes
    it). A float is refused even when whole: a list is written by hand."""
    try:
        if isinstance(value, float):
            raise ValidationError("a float")
        return check_seed(value, field)
    except ValidationError:
        raise PhraseFileError(f"{at}: field {field}: {value!r} is not a whole number 0..{MAX_SEED}") from None


def check_list_speed(value: Any, at: str) -> float:
    """A speed given in a list (``at``: where)."""
    try:
        return check_speed(value)
    except ValidationError:
        raise PhraseFileError(f'{at}: field "speed": {value!r} is not a number {MIN_SPEED}..{MAX_SPEED}') from None


# --- validation internals ----------------------------------------------------------------


def _unknown(obj: Mapping[str, Any], known: set[str], source: str, where: str) -> None:
    for key in obj:
        if key not in known:
            raise PhraseFileError(f"{source}: {where}: field {key!r} is not known; use {', '.join(sorted(known))}")


def _voice(name: Any, spec: Any, roots: list[Path], rule: str, source: str) -> VoiceSpec:
    where = f"voices[{name!r}]"
    if not isinstance(name, str) or not name.strip():
        raise PhraseFileError(f"{source}: {where}: a voice needs a non-empty name")
    if isinstance(spec, str):  # shorthand: "zh": "zh-female"
        spec = {"preset": spec}
    if not isinstance(spec, dict):
        raise PhraseFileError(f'{source}: {where}: must be an object with "preset" or "prompt_audio"')
    _unknown(spec, _VOICE_KEYS, source, where)
    preset, audio, text = spec.get("preset"), spec.get("prompt_audio"), spec.get("prompt_text", "")
    if (preset is None) == (audio is None):
        raise PhraseFileError(f'{source}: {where}: field "preset" or "prompt_audio": give exactly one of them')
    if not isinstance(text, str):
        raise PhraseFileError(f'{source}: {where}: field "prompt_text": must be text')
    if preset is not None:
        if not isinstance(preset, str) or not preset.strip():
            raise PhraseFileError(f'{source}: {where}: field "preset": must be a voice name such as zh-female')
        if text:
            raise PhraseFileError(f'{source}: {where}: field "prompt_text": only goes with prompt_audio')
        return VoiceSpec(voice=preset.strip())
    if not isinstance(audio, str) or not audio.strip():
        raise PhraseFileError(f'{source}: {where}: field "prompt_audio": must be a path to an audio file')
    path = _inside(audio, roots)
    if path is None:
        # One message whether the file is missing, outside the allowed folders, or a
        # symlink out of them: a phrase list must not tell what exists on the server.
        raise PhraseFileError(f'{source}: {where}: field "prompt_audio": {cut_text(audio)!r} {rule}')
    return VoiceSpec(prompt_audio=str(path), prompt_text=text)


def _inside(audio: str, roots: list[Path]) -> Path | None:
    """The real path of ``audio`` (relative to a root, or absolute) if it is a regular
    file inside one of ``roots`` once every symlink and ``..`` is resolved; else None."""
    given = Path(audio)
    for root in roots:
        try:
            real_root = root.resolve(strict=True)
            real = (given if given.is_absolute() else root / given).resolve(strict=True)
        except (OSError, RuntimeError):  # missing, a symlink loop, unreadable
            continue
        if real.is_relative_to(real_root) and real.is_file():
            return real
    return None


def _phrase(where: str, spec: Any, voices: Mapping[str, VoiceSpec], source: str) -> list[PhraseRequest]:
    if not isinstance(spec, dict):
        raise PhraseFileError(f'{source}: {where}: must be an object with "text" and "voice"')
    _unknown(spec, _PHRASE_KEYS, source, where)
    text = spec.get("text")
    if not isinstance(text, str) or not text.strip():
        raise PhraseFileError(f'{source}: {where}: field "text": must be non-empty text')
    label = f"{where} ({cut_text(text)!r})"
    voice_name = spec.get("voice")
    if not isinstance(voice_name, str) or voice_name not in voices:
        known = ", ".join(sorted(voices))
        raise PhraseFileError(f'{source}: {label}: field "voice": {voice_name!r} is not a voice; use one of {known}')
    for single, many in (("seed", "seeds"), ("style", "styles")):
        if single in spec and many in spec:
            raise PhraseFileError(f"{source}: {label}: field {many!r}: give {single!r} or {many!r}, not both")
    seed_field = "seeds" if "seeds" in spec else "seed"
    given = _list(spec, "seeds", source, label) if "seeds" in spec else [spec.get("seed")]
    # No seed: the phrase's approved take if it has one, else seed 0 (the same key as "seed": 0).
    seeds = [None if seed is None else check_list_seed(seed, f"{source}: {label}", repr(seed_field)) for seed in given]
    styles = _list(spec, "styles", source, label) if "styles" in spec else [spec.get("style", "")]
    for style in styles:
        if not isinstance(style, str):
            name = "styles" if "styles" in spec else "style"
            raise PhraseFileError(f"{source}: {label}: field {name!r}: {style!r} is not text")
    speed = check_list_speed(spec.get("speed", 1.0), f"{source}: {label}")
    take = spec.get("take", "")
    if not isinstance(take, str) or (take and not re.fullmatch(r"[0-9a-f]{32}", take)):
        raise PhraseFileError(f"{source}: {label}: field 'take': must be 32 hexadecimal digits (as Export writes it)")
    mode = spec.get("mode", "")
    if mode != "" and mode not in PHRASE_MODES:
        raise PhraseFileError(
            f'{source}: {label}: field "mode": {mode!r} is not a mode; use one of {", ".join(PHRASE_MODES)}'
        )
    if mode == "instruct" and not all(isinstance(s, str) and s.strip() for s in styles):
        name = "styles" if "styles" in spec else "style"
        raise PhraseFileError(
            f"{source}: {label}: field {name!r}: instruct mode needs a style instruction for every request, "
            'e.g. "style": "开心"'
        )
    voice = voices[voice_name]
    return [
        PhraseRequest(where, text, take, mode, **vars(replace(voice, style=style, seed=seed, speed=speed)))
        for seed, style in itertools.product(seeds, styles)
    ]


def _list(spec: Mapping[str, Any], name: str, source: str, label: str) -> list[Any]:
    value = spec[name]
    if not isinstance(value, list) or not value:
        raise PhraseFileError(f"{source}: {label}: field {name!r}: must be a non-empty list")
    return value
