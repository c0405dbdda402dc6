"""The pronunciation lexicon: entries, their validation, the operator's file, the shipped list.

An entry is ``{"term": "六安", "reading": "lu4 an1", "voice": null}``. ``voice`` scopes it
to one voice; a voice-scoped entry wins over a global one for the same term, and any
operator entry wins over the shipped lexicon (``data/shipped_lexicon.tsv``).

Validation (:func:`validate_entry`), each failure a :class:`LexiconError` naming the entry:

- ``term``: 1-32 characters after NFKC and white-space folding, with at least one Han
  character, Latin letter or digit;
- ``reading``: space-separated units, each a pinyin syllable from ``data/syllables.txt``
  with a tone number 1-5 (tone marks and ü are accepted and stored as numbers and v),
  an upper-case letter, or a lower-case English word;
- counts: a term of Han characters only has exactly one syllable per character and
  nothing else. A term with Latin letters or digits (``A座``, ``12306``, ``T3航站楼``) has
  at least one syllable per Han character, and at least one unit more for each run of
  letters/digits (its letters, words or digit syllables: ``A zuo4``, ``yao1 er4 san1
  ling2 liu4``; ``Wi-Fi`` is one run): such runs can be said in more than one way, so
  only the minimum is checked. English words are allowed only for terms with Latin letters.

The file is a JSON list of entries, one per line as saved, so an error names its line.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import re
import threading
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from lib.core.atomicfile import write_private
from lib.core.logtext import cut_text
from lib.errors import ConfigError, ValidationError
from lib.text.normalise import normalise_text
from lib.text.syllables import SYLLABLES, is_han, normalise_unit, unit_kind

__all__ = [
    "MAX_ENTRIES",
    "MAX_TERM_CHARS",
    "Lexicon",
    "LexiconEntry",
    "LexiconError",
    "LexiconFileError",
    "shipped_entries",
    "units_allowed",
    "validate_entry",
]

_LOGGER = logging.getLogger(__name__)

#: Default size limit of an operator lexicon.
MAX_ENTRIES = 10_000
MAX_TERM_CHARS = 32
_SHIPPED = Path(__file__).with_name("data") / "shipped_lexicon.tsv"
#: A run of letters or digits; ``-``, ``.`` and ``'`` inside it keep it one run (Wi-Fi, 3.5).
_RUN = re.compile(r"[A-Za-z0-9]+(?:[-.'][A-Za-z0-9]+)*")
_TONED = re.compile(r"^([a-z]+)(\d+)$")
_VOICE = re.compile(r"^[\w.\-]{1,64}$")


class LexiconError(ValidationError):
    """A lexicon entry (or the lexicon as a whole) is invalid (HTTP 422)."""

    http_status = 422


class LexiconFileError(ConfigError):
    """The lexicon file cannot be used; the message names the file and line."""


@dataclass(frozen=True, slots=True)
class LexiconEntry:
    """One validated entry."""

    term: str
    reading: str
    voice: str | None = None
    note: str = ""
    """Why the reading is right (the shipped lexicon's source); not part of the key."""

    def to_json(self) -> dict[str, str | None]:
        return {"term": self.term, "reading": self.reading, "voice": self.voice}


def units_allowed(term: str) -> int:
    """The most units a reading of ``term`` may have: one per Han character and two per
    other character (a letter may be read as a word, "5G" as "wu3 G"), and 2 more. A
    reading bounded so cannot make a short text minutes of audio (2,000 units once made a
    5-character text 19 minutes long)."""
    han = sum(1 for ch in term if is_han(ch))
    return han + 2 * (len(term) - han) + 2


def validate_entry(term: object, reading: object, voice: object = None, note: str = "") -> LexiconEntry:
    """A checked, canonical entry, or :class:`LexiconError` saying what is wrong."""
    if not isinstance(term, str) or not normalise_text(term):
        raise LexiconError(f"lexicon entry {term!r}: the term is empty; give the word or name to read")
    for field, value in (("term", term), ("reading", reading)):
        spaces = "\t\n\r" if field == "reading" else ""  # the units' separators
        text = value if isinstance(value, str) else ""
        control = next((ch for ch in text if unicodedata.category(ch) == "Cc" and ch not in spaces), None)
        if control is not None:
            raise LexiconError(
                f"lexicon entry {cut_text(normalise_text(term))!r}: the {field} holds the control character "
                f"U+{ord(control):04X}; type it as it is written"
            )
    term = normalise_text(term)
    name = f"lexicon entry {term!r}"
    if len(term) > MAX_TERM_CHARS:
        raise LexiconError(f"{name}: the term is longer than {MAX_TERM_CHARS} characters")
    if not any(is_han(ch) or (ch.isascii() and ch.isalnum()) for ch in term):
        raise LexiconError(f"{name}: the term has no Han character, letter or digit to read")
    if voice is not None and (not isinstance(voice, str) or not _VOICE.match(voice)):
        raise LexiconError(f"{name}: voice must be null or a voice name (letters, digits, . _ -), not {voice!r}")
    if not isinstance(reading, str) or not reading.strip():
        raise LexiconError(f"{name}: the reading is empty; give pinyin with tone numbers, e.g. 'lu4 an1'")
    units = [normalise_unit(u) for u in reading.split()]
    most = units_allowed(term)
    if len(units) > most:
        raise LexiconError(
            f"{name}: the reading has {len(units)} units, more than the {most} a term of {len(term)} characters "
            "can take (one syllable per Han character, up to two units per other character); give the reading of "
            "the term alone"
        )
    kinds = [_check_unit(name, unit) for unit in units]
    han = sum(1 for ch in term if is_han(ch))
    runs = len(_RUN.findall(term))
    syllables = kinds.count("syllable")
    if "word" in kinds and not any(ch.isascii() and ch.isalpha() for ch in term):
        word = units[kinds.index("word")]
        raise LexiconError(f"{name}: {word!r} has no tone number; write pinyin with a tone 1-5, e.g. 'lu4'")
    if runs == 0 and (syllables != han or len(units) != han):
        raise LexiconError(
            f"{name}: the term has {han} Han character{'s' if han != 1 else ''} but the reading "
            f"{' '.join(units)!r} has {len(units)} unit{'s' if len(units) != 1 else ''}; "
            "give one syllable per character"
        )
    if runs and (syllables < han or len(units) < han + runs):
        raise LexiconError(
            f"{name}: the reading {' '.join(units)!r} is too short: one syllable for each of the {han} Han "
            f"character(s) and at least one unit for each of the {runs} run(s) of letters or digits"
        )
    return LexiconEntry(term, " ".join(units), voice, note)


def _check_unit(name: str, unit: str) -> str:
    kind = unit_kind(unit)
    if kind != "bad":
        return kind
    m = _TONED.match(unit)
    if m is not None and m.group(1) in SYLLABLES:
        raise LexiconError(f"{name}: {unit!r} has tone {m.group(2)}; a tone is 1-5 (5 for the neutral tone)")
    if m is not None:
        raise LexiconError(f"{name}: {m.group(1)!r} (in {unit!r}) is not a pinyin syllable; write ü as v, e.g. 'lv3'")
    raise LexiconError(
        f"{name}: {unit!r} is not a pinyin syllable with a tone 1-5, a capital letter or an English word"
    )


class Lexicon:
    """The operator's entries; thread-safe. Readers take :meth:`snapshot`, which never
    changes: every edit makes a new one and a new :attr:`version`."""

    def __init__(self, entries: Iterable[LexiconEntry] = (), *, limit: int = MAX_ENTRIES) -> None:
        self.limit = limit
        self._lock = threading.Lock()
        table: dict[tuple[str, str | None], LexiconEntry] = {}
        for e in entries:
            table[(e.term, e.voice)] = e
        if len(table) > limit:
            raise LexiconError(f"the lexicon has {len(table)} entries; the limit is {limit}")
        self._entries = table
        self._version = _version(table.values())

    @property
    def version(self) -> str:
        """Changes exactly when the entries change (16 hex digits)."""
        return self._version

    def snapshot(self) -> tuple[LexiconEntry, ...]:
        """The entries, sorted by term then voice (global first)."""
        return tuple(sorted(self._entries.values(), key=lambda e: (e.term, e.voice or "")))

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, term: str, voice: str | None = None) -> LexiconEntry | None:
        return self._entries.get((normalise_text(term), voice))

    def add(self, term: object, reading: object, voice: object = None) -> LexiconEntry:
        """Validate and add (or replace) an entry; :class:`LexiconError` if invalid or full."""
        entry = validate_entry(term, reading, voice)
        with self._lock:
            key = (entry.term, entry.voice)
            if key not in self._entries and len(self._entries) >= self.limit:
                raise LexiconError(
                    f"lexicon entry {entry.term!r}: the lexicon is full ({self.limit} entries); delete some first"
                )
            table = dict(self._entries)
            table[key] = entry
            self._commit(table)
        return entry

    def remove(self, term: str, voice: str | None = None) -> bool:
        """Delete the entry for ``term`` in scope ``voice``; ``False`` if there was none."""
        with self._lock:
            key = (normalise_text(term), voice)
            if key not in self._entries:
                return False
            table = dict(self._entries)
            del table[key]
            self._commit(table)
        return True

    def replace(self, entries: Iterable[LexiconEntry]) -> None:
        """Make the entries exactly ``entries`` (already validated: another replica's
        lexicon, as the shared tier holds it)."""
        table = {(e.term, e.voice): e for e in entries}
        with self._lock:
            self._commit(table)

    def _commit(self, table: dict[tuple[str, str | None], LexiconEntry]) -> None:
        self._entries = table
        self._version = _version(table.values())

    def to_json(self) -> str:
        """One entry per line, so a load error can name the line."""
        lines = [json.dumps(e.to_json(), ensure_ascii=False, sort_keys=True) for e in self.snapshot()]
        return "[\n" + ",\n".join(lines) + ("\n]\n" if lines else "]\n")

    def save(self, path: str | Path) -> None:
        """Write the file atomically (temporary file, fsync, rename), mode 0600."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        write_private(path, self.to_json().encode("utf-8"))

    @classmethod
    def load(cls, path: str | Path, *, limit: int = MAX_ENTRIES) -> Lexicon:
        """The lexicon in ``path`` (empty if the file does not exist);
        :class:`LexiconFileError` naming the file and line if it is bad."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return cls(limit=limit)
        except (OSError, UnicodeDecodeError) as exc:
            raise LexiconFileError(f"{path}: cannot read the lexicon file: {exc}") from exc
        return cls.from_json(text, source=str(path), limit=limit)

    @classmethod
    def from_json(cls, text: str, *, source: str = "lexicon", limit: int = MAX_ENTRIES) -> Lexicon:
        try:
            data = json.loads(text) if text.strip() else []
        except json.JSONDecodeError as exc:
            raise LexiconFileError(f"{source}, line {exc.lineno}: not valid JSON: {exc.msg}") from exc
        if isinstance(data, dict) and isinstance(data.get("entries"), list):
            data = data["entries"]
        if not isinstance(data, list):
            raise LexiconFileError(f"{source}, line 1: expected a JSON list of entries like {_EXAMPLE}")
        lines = _object_lines(text)
        entries: list[LexiconEntry] = []
        for i, item in enumerate(data):
            line = lines[i] if i < len(lines) else 1
            if not isinstance(item, dict) or set(item) - {"term", "reading", "voice"} or "term" not in item:
                raise LexiconFileError(f"{source}, line {line}: expected an entry like {_EXAMPLE}, got {item!r}")
            try:
                entries.append(validate_entry(item.get("term"), item.get("reading"), item.get("voice")))
            except LexiconError as exc:
                raise LexiconFileError(f"{source}, line {line}: {exc}") from exc
        try:
            return cls(entries, limit=limit)
        except LexiconError as exc:
            raise LexiconFileError(f"{source}: {exc}") from exc


_EXAMPLE = '{"term": "六安", "reading": "lu4 an1", "voice": null}'


def _version(entries: Iterable[LexiconEntry]) -> str:
    lines = sorted(f"{e.term}\t{e.reading}\t{e.voice or ''}" for e in entries)
    return hashlib.sha256("\n".join(lines).encode("utf-8")).hexdigest()[:16]


def _object_lines(text: str) -> list[int]:
    """The line of each JSON object that is a member of a list, in order."""
    lines: list[int] = []
    stack: list[str] = []
    line = 1
    in_string = escape = False
    for ch in text:
        if ch == "\n":
            line += 1
        if in_string:
            if escape:
                escape = False
            elif ch == "\\":
                escape = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"':
            in_string = True
        elif ch in "[{":
            if ch == "{" and stack and stack[-1] == "[":
                lines.append(line)
            stack.append(ch)
        elif ch in "]}" and stack:
            stack.pop()
    return lines


@functools.cache
def shipped_entries() -> tuple[LexiconEntry, ...]:
    """The lexicon shipped with the app: term, reading and source of each entry.

    A bad line is a bug in the shipped data, so it raises at once (and the tests load it)."""
    entries: list[LexiconEntry] = []
    for n, raw in enumerate(_SHIPPED.read_text(encoding="utf-8").splitlines(), 1):
        if not raw.strip() or raw.startswith("#"):
            continue
        fields = raw.split("\t")
        if len(fields) != 3 or not fields[2].strip():
            raise LexiconFileError(f"{_SHIPPED}, line {n}: expected term<TAB>reading<TAB>source")
        try:
            entries.append(validate_entry(fields[0], fields[1], None, fields[2].strip()))
        except LexiconError as exc:
            raise LexiconFileError(f"{_SHIPPED}, line {n}: {exc}") from exc
    return tuple(entries)
