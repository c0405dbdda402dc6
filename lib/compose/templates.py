"""Slot templates in a phrase file: schema, validation at load time, pieces, matching.

Queue calls are one sentence with a few changing parts: "请{ticket}号顾客到{window}号窗口
办理业务。". Cached whole, every ticket number is a new miss; a template says which parts
change and how they are read, so a request is composed from cached *pieces*: the fixed
parts, and the readings of slot values ("A023" read ``characters`` is the pieces "A",
"零", "二", "三"). The preload makes the pieces, not the sentences: A000-Z999 at 10
windows is 3 fixed parts + 36 characters + 10 numbers, not 260,000 sentences::

    "templates": [
      {"template": "请{ticket}号顾客到{window}号窗口办理业务。", "voice": "counter",
       "slots": {"ticket": {"pattern": "[A-Z][0-9]{3}", "read": "characters"},
                 "window": {"values": ["1", "2", "3"], "read": "number"}},
       "refine": true}
    ]

A slot has a ``pattern`` (a regular expression a value must match whole), ``values``
(the values to preload; each must match the pattern when both are given), or both, and
``read``: ``characters``, ``number`` or ``text`` (default; see :mod:`lib.compose.readings`).

Patterns are matched by RE2 (:mod:`lib.compose.patterns`: linear time, no
back-references or look-arounds) and must be *narrow*: a value is at most
:data:`MAX_SLOT_CHARS` characters (``[A-Z][0-9]{3}``, ``[0-9]{1,4}``; not ``[A-Za-z ]+``),
and a template needs fixed words to anchor it. Otherwise a template such as ``"{x}."``
with ``[A-Za-z ]+`` would capture every sentence in its voice and spell it letter by
letter. A list holds at most :data:`MAX_TEMPLATES` templates.
Optional per template: ``style``, ``seed``, ``speed`` (as for phrases), ``language``
(``zh`` or ``en``: how digits are read; default ``zh`` when the template has Han text)
and ``refine`` (after a composed answer, synthesise the whole sentence in the background
and store it under the sentence's own key, so the next request is a plain hit with
natural prosody). Every error names the template and the field.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from lib.compose.patterns import CompiledPattern, PatternError, compile_pattern
from lib.compose.readings import LANGUAGES, READS, is_number, read
from lib.core.logtext import cut_text
from lib.request.phrases import (
    PhraseFileError,
    PhraseRules,
    VoiceSpec,
    check_list_seed,
    check_list_speed,
    parse_voices,
    read_phrase_file,
)
from lib.request.types import TTSRequest

__all__ = ["MAX_PIECES", "MAX_SLOT_CHARS", "MAX_TEMPLATES", "Slot", "Template", "load_templates", "parse_templates"]

_LOGGER = logging.getLogger(__name__)

_TEMPLATE_KEYS = {"template", "voice", "slots", "style", "seed", "speed", "refine", "language"}
_SLOT_KEYS = {"pattern", "values", "read"}
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
#: Most pieces one template may need preloaded (its fixed parts and slot readings).
MAX_PIECES = 2000
#: Most templates in one phrase list (and in a running service, lib.compose.templatebook).
MAX_TEMPLATES = 100
#: Longest value a slot pattern may match.
MAX_SLOT_CHARS = 32
_MAX_ALPHABET = 200


@dataclass(frozen=True)
class Slot:
    """One slot: what values match and how they are read."""

    name: str
    pattern: str | None
    values: tuple[str, ...]
    read: str

    @property
    def regex(self) -> str:
        if self.pattern is not None:
            return f"(?:{self.pattern})"
        return "(?:" + "|".join(re.escape(v) for v in sorted(self.values, key=len, reverse=True)) + ")"

    def alphabet(self) -> list[str]:
        """Every character a value can hold (``characters`` slots)."""
        chars = set(_pattern_alphabet(self.pattern)) if self.pattern is not None else set()
        for value in self.values:
            chars.update(value)
        return sorted(ch for ch in chars if not ch.isspace())


@dataclass(frozen=True)
class Template(VoiceSpec):
    """A validated template; ``parts`` alternates fixed text and slot names (odd indexes).
    Its voice and settings are a :class:`lib.request.phrases.VoiceSpec`, as a phrase's are."""

    entry: str
    """Where it came from, e.g. ``templates[0]`` (for messages)."""
    text: str
    refine: bool
    language: str
    parts: tuple[str, ...]
    slots: Mapping[str, Slot]

    @property
    def id(self) -> str:
        """Stable name of the template (its text and voice settings), for entry marks."""
        doc = [self.text, self.voice, self.prompt_audio, self.prompt_text, self.style, self.seed, self.speed]
        return hashlib.md5(json.dumps(doc, ensure_ascii=False).encode("utf-8")).hexdigest()[:12]

    def request(self, text: str) -> TTSRequest:
        """A request for ``text`` in this template's voice and settings."""
        return self.speaking(text)

    def slot_pieces(self, name: str, value: str) -> list[str]:
        return read(value, self.slots[name].read, self.language)

    def pieces(self, fixed: Sequence[str] | None = None) -> list[str]:
        """Texts of every piece the preload makes: each fixed part (``fixed``: the fixed
        parts as normalised by the service), and the readings of each slot's characters
        or values (not their combinations)."""
        out: list[str] = []
        for i, part in enumerate(self.parts):
            if i % 2 == 0:
                piece = fixed_piece(part if fixed is None else fixed[i // 2])
                out.extend([piece] if piece else [])
                continue
            slot = self.slots[part]
            if slot.read == "characters":
                out.extend(read("".join(slot.alphabet()), "characters", self.language))
            else:
                for value in slot.values:
                    out.extend(read(value, slot.read, self.language))
        return list(dict.fromkeys(out))


def fixed_piece(part: str) -> str:
    """The piece a fixed part is spoken as: without white space and leading punctuation
    (it only makes a pause), "" when nothing in it can be spoken."""
    text = part.strip()
    while text and not text[0].isalnum():
        text = text[1:].lstrip()
    return text if any(ch.isalnum() for ch in text) else ""


# --- loading and validation --------------------------------------------------------------


def load_templates(path: str | Path, rules: PhraseRules | None = None) -> list[Template]:
    """The templates of a phrase file (none when it has no ``templates``); ``rules``
    confine prompt paths as for phrases."""
    file = Path(path)
    return parse_templates(read_phrase_file(file), base_dir=file.resolve().parent, source=str(file), rules=rules)


def parse_templates(
    data: Any, *, base_dir: Path, source: str = "phrases", rules: PhraseRules | None = None
) -> list[Template]:
    """Validate the ``templates`` of a decoded phrase document."""
    if not isinstance(data, dict) or "templates" not in data:
        return []
    raw = data["templates"]
    if not isinstance(raw, list):
        raise PhraseFileError(f'{source}: field "templates": must be a list of template objects')
    if len(raw) > MAX_TEMPLATES:
        raise PhraseFileError(
            f'{source}: field "templates": {len(raw)} templates, over the limit of {MAX_TEMPLATES}; '
            "every miss is matched against each of them: keep the ones callers use"
        )
    voices = parse_voices(data, base_dir=base_dir, source=source, rules=rules)
    return [_template(f"templates[{i}]", spec, voices, source) for i, spec in enumerate(raw)]


def _template(where: str, spec: Any, voices: Mapping[str, VoiceSpec], source: str) -> Template:
    if not isinstance(spec, dict):
        raise PhraseFileError(f'{source}: {where}: must be an object with "template", "voice" and "slots"')
    _unknown(spec, _TEMPLATE_KEYS, f"{source}: {where}")
    text = spec.get("template")
    if not isinstance(text, str) or not text.strip():
        raise PhraseFileError(f'{source}: {where}: field "template": must be non-empty text with {{slot}} places')
    at = f"{source}: {where} ({cut_text(text)!r})"
    parts = _parts(text, at)
    used = parts[1::2]
    slots_raw = spec.get("slots")
    if not isinstance(slots_raw, dict) or not slots_raw:
        raise PhraseFileError(f'{at}: field "slots": must be an object describing each {{slot}} of the template')
    for name in used:
        if name not in slots_raw:
            known = ", ".join(sorted(slots_raw))
            raise PhraseFileError(f'{at}: field "template": unknown slot {{{name}}}; define it in "slots" ({known})')
    if not any(ch.isalnum() for part in parts[0::2] for ch in part):
        raise PhraseFileError(
            f'{at}: field "template": has no fixed words, only slots and punctuation; it would match any '
            "sentence in its voice: write the words around the slots"
        )
    slots = {name: _slot(name, slot_spec, f"{at}: slots[{name!r}]") for name, slot_spec in slots_raw.items()}
    for name in slots:
        if name not in used:
            raise PhraseFileError(f"{at}: slots[{name!r}]: is not used in the template; remove it or add {{{name}}}")
    voice_name = spec.get("voice")
    if not isinstance(voice_name, str) or voice_name not in voices:
        known = ", ".join(sorted(voices))
        raise PhraseFileError(f'{at}: field "voice": {voice_name!r} is not a voice; use one of {known}')
    voice = voices[voice_name]
    style = spec.get("style", "")
    if not isinstance(style, str):
        raise PhraseFileError(f'{at}: field "style": must be text')
    seed = check_list_seed(spec.get("seed", 0), at, '"seed"')
    speed = check_list_speed(spec.get("speed", 1.0), at)
    refine = spec.get("refine", False)
    if not isinstance(refine, bool):
        raise PhraseFileError(f'{at}: field "refine": must be true or false')
    has_han = any("\u3400" <= ch <= "\u9fff" for ch in text)
    language = spec.get("language", "zh" if has_han else "en")
    if language not in LANGUAGES:
        raise PhraseFileError(f'{at}: field "language": {language!r}; use one of {", ".join(LANGUAGES)}')
    spoken = replace(voice, style=style, seed=seed, speed=speed)
    template = Template(where, text, refine, language, tuple(parts), slots, **vars(spoken))
    count = len(template.pieces())
    if count > MAX_PIECES:
        raise PhraseFileError(f"{at}: needs {count} pieces, over the limit of {MAX_PIECES}; list fewer values")
    return template


def _parts(text: str, at: str) -> list[str]:
    """Fixed text and slot names, alternating (``{{`` and ``}}`` are literal braces)."""
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise PhraseFileError(
            f'{at}: field "template": {exc}; mark slots as {{name}} and write {{{{ or }}}} for a literal brace'
        ) from None
    parts: list[str] = []
    for literal, name, spec, conversion in parsed:
        if parts and len(parts) % 2 == 0 and not literal.strip() and name is not None:
            raise PhraseFileError(
                f'{at}: field "template": slots {{{parts[-1]}}} and {{{name}}} touch; put fixed text between them'
            )
        parts.append(literal)
        if name is None:
            break
        if spec or conversion or not _NAME_RE.match(name):
            raise PhraseFileError(f'{at}: field "template": {{{name}}} is not a slot name (letters, digits, _)')
        if name in parts[1::2]:
            raise PhraseFileError(f'{at}: field "template": slot {{{name}}} appears twice; give each place a slot')
        parts.append(name)
    if len(parts) % 2 == 0:
        parts.append("")
    if len(parts) < 3:
        raise PhraseFileError(f'{at}: field "template": has no {{slot}}; a phrase without slots goes in "phrases"')
    return parts


def _slot(name: str, spec: Any, at: str) -> Slot:
    if not isinstance(spec, dict):
        raise PhraseFileError(f'{at}: must be an object with "pattern" or "values"')
    _unknown(spec, _SLOT_KEYS, at)
    how = spec.get("read", "text")
    if how not in READS:
        raise PhraseFileError(f'{at}: field "read": {how!r}; use one of {", ".join(READS)}')
    pattern = spec.get("pattern")
    values = spec.get("values", [])
    compiled: CompiledPattern | None = None
    if pattern is None and not values:
        raise PhraseFileError(f'{at}: give "pattern" (what values match) or "values" (the values to preload)')
    if pattern is not None:
        if not isinstance(pattern, str) or not pattern:
            raise PhraseFileError(f'{at}: field "pattern": must be a regular expression')
        try:
            compiled = compile_pattern(pattern)
        except PatternError as exc:
            raise PhraseFileError(f'{at}: field "pattern": {cut_text(pattern, 80)!r} {exc}') from None
        if compiled.fullmatch(""):
            raise PhraseFileError(f'{at}: field "pattern": {pattern!r} matches empty text; a value must say something')
        if how == "characters":
            try:
                _pattern_alphabet(pattern)
            except ValueError as exc:
                raise PhraseFileError(f'{at}: field "pattern": {exc}') from None
        elif not values:
            raise PhraseFileError(
                f'{at}: a slot read as {how} needs "values" (the preload makes one piece per value); '
                'list them, or read it as "characters"'
            )
        longest = _longest_match(pattern)
        if longest is None or longest > MAX_SLOT_CHARS:
            size = "of any length" if longest is None else f"up to {longest} characters long"
            raise PhraseFileError(
                f'{at}: field "pattern": {cut_text(pattern, 80)!r} matches values {size}; a slot value is at most '
                f"{MAX_SLOT_CHARS} characters (an open pattern captures whole sentences): bound every repeat, "
                "e.g. [0-9]{1,4} instead of [0-9]+"
            )
    if not isinstance(values, list) or not all(isinstance(v, str) and v.strip() for v in values):
        raise PhraseFileError(f'{at}: field "values": must be a list of non-empty texts')
    for value in values:
        if compiled is not None and not compiled.fullmatch(value):
            raise PhraseFileError(f'{at}: field "values": {value!r} does not match its pattern {pattern!r}')
        if how == "number" and not is_number(value):
            raise PhraseFileError(f'{at}: field "values": {value!r} is not a number; use "read": "text"')
    return Slot(name, pattern, tuple(dict.fromkeys(values)), how)


def _longest_match(pattern: str) -> int | None:
    """The most characters ``pattern`` can match (from the stdlib's parse tree: parsing
    is linear, only matching backtracks), or None when unbounded or not parseable."""
    parser: Any = importlib.import_module("re._parser")
    try:
        longest = int(parser.parse(pattern).getwidth()[1])
    except (re.error, ValueError, OverflowError, RecursionError):
        return None
    return None if longest >= 1 << 31 else longest  # unbounded: the parser's MAXWIDTH


def _unknown(obj: Mapping[str, Any], known: set[str], at: str) -> None:
    for key in obj:
        if key not in known:
            raise PhraseFileError(f"{at}: field {key!r} is not known; use {', '.join(sorted(known))}")


def _pattern_alphabet(pattern: str) -> list[str]:
    """Every character a match of ``pattern`` can contain, from its parse tree; raises
    ValueError for patterns whose characters cannot be listed (``.``, ``[^...]``, ``\\w``)."""
    # The stdlib's own regular-expression parser (no stubs, hence the dynamic import).
    parser: Any = importlib.import_module("re._parser")
    found: set[str] = set()

    def walk(items: Any) -> None:
        for op, arg in items:
            name = str(op)
            if name == "LITERAL":
                found.add(chr(arg))
            elif name == "IN":
                for sub_op, sub_arg in arg:
                    _class_item(str(sub_op), sub_arg, found)
            elif name in ("MAX_REPEAT", "MIN_REPEAT", "POSSESSIVE_REPEAT"):
                walk(arg[2])
            elif name in ("SUBPATTERN", "ATOMIC_GROUP"):
                walk(arg[-1])
            elif name == "BRANCH":
                for branch in arg[1]:
                    walk(branch)
            elif name != "AT":
                raise ValueError(
                    f"cannot list the characters {pattern!r} allows ({name.lower()}); "
                    "use explicit classes such as [A-Z0-9]"
                )

    walk(parser.parse(pattern))
    if len(found) > _MAX_ALPHABET:
        raise ValueError(f"{pattern!r} allows {len(found)} characters, over {_MAX_ALPHABET}; narrow it")
    return sorted(found)


def _class_item(op: str, arg: Any, found: set[str]) -> None:
    if op == "LITERAL":
        found.add(chr(arg))
    elif op == "RANGE":
        lo, hi = arg
        if hi - lo > _MAX_ALPHABET:
            raise ValueError(f"the range {chr(lo)}-{chr(hi)} is too wide to preload; narrow it")
        found.update(chr(c) for c in range(lo, hi + 1))
    elif op == "CATEGORY" and str(arg) == "CATEGORY_DIGIT":
        found.update("0123456789")
    else:
        raise ValueError(f"cannot list the characters of {op.lower()} {arg}; use explicit classes such as [A-Z0-9]")
