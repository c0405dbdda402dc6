"""The templates a running service answers, and matching a request against them.

Where the service gets its templates: ``templates.file`` in the configuration (default
``hot_phrases.json`` in the working directory, the list ``./run.sh`` preloads; a missing
file means none; null turns them off), plus the templates of every list run through the
web UI's Preload tab (they replace templates with the same text and voice settings).
``preload_cache.py`` in another process makes the pieces in the shared cache but cannot
tell a running server about new templates: put them in the configured file.

Only the configured file and the admin change the templates every request is matched
against: the web UI's Preload tab enables an uploaded list's templates for the admin
(the admin token), and preloads a non-admin's templates as pieces without enabling them
(:meth:`TemplateBook.add` takes the caller). A service holds at most
:data:`lib.compose.templates.MAX_TEMPLATES` templates.

A request matches a template when it asks for exactly the template's voice, style,
seed, speed and mode (the pieces were made with those, and a request for another voice
must not get them; checked first, so a template is only ever tried on requests in its
own voice) and its normalised text matches the template's pattern (fixed parts
normalised like request text; a final ``。`` or ``.`` may be left out). Patterns run on
RE2 (:mod:`lib.compose.patterns`): a match takes time linear in the text whatever the
pattern, so matching on every miss cannot stall a worker, the event loop or the process.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from lib.cache.keys import KeyFields
from lib.compose.assemble import Finish
from lib.compose.patterns import CompiledPattern, PatternError, PatternMatch, compile_pattern
from lib.compose.segments import split
from lib.compose.templates import MAX_TEMPLATES, Template, fixed_piece, load_templates
from lib.config import AppConfig
from lib.core.logtext import cut_text
from lib.errors import ConfigError, TTSError
from lib.request.access import LOCAL, Action, Caller, check
from lib.request.phrases import PhraseFileError
from lib.request.types import Resolved, TTSRequest
from lib.request.validate import check_text
from lib.text.tokens import Reading

__all__ = ["Match", "Reader", "TemplateBook"]

#: Reads a text as a voice says it (``text``, ``voice``, ``language``): the service's front end.
Reader = Callable[[str, str | None, str], Reading]

_LOGGER = logging.getLogger(__name__)

_ENDS = "。！？!?."
_CLAUSES = "，,、；;：:"
_SENTINEL = 0xE000  # private-use characters stand in for slots while the text is normalised


@dataclass(frozen=True)
class Match:
    """A request composed from ``template``'s pieces: each piece text and the seconds of
    pause after it (0: crossfade into the next)."""

    template: Template
    pieces: tuple[tuple[str, float], ...]


@dataclass
class _Compiled:
    template: Template
    regex: CompiledPattern
    fixed: tuple[str, ...]
    """The template's fixed parts, normalised like request text."""
    base: KeyFields | None = None
    """The key fields of the template's voice and settings (text blank), once resolved."""
    broken: bool = False


class TemplateBook:
    """Thread-safe set of templates. ``resolve`` resolves a request without synthesis
    (the service's), ``normalise`` normalises text as requests are normalised."""

    def __init__(
        self, resolve: Callable[[TTSRequest], Resolved], normalise: Callable[[str], str], finish: Finish,
        *, ignore_case: bool = False, read: Reader | None = None,
    ) -> None:  # fmt: skip
        """``read``: the front end, to read a ``text`` slot's value in its sentence
        (:meth:`value_pieces`); without it a value is its own piece."""
        self._resolve = resolve
        self._read = read
        self._normalise = normalise
        self._ignore_case = ignore_case
        """With ``text.casefold`` requests arrive in lower case: "a023" is still A023."""
        self.finish = finish
        self._lock = threading.Lock()
        self._compiled: dict[str, _Compiled] = {}
        self._fields: tuple[object, list[tuple[KeyFields, str]]] | None = None

    @classmethod
    def configured(
        cls, config: AppConfig, resolve: Callable[[TTSRequest], Resolved], finish: Finish, read: Reader | None = None
    ) -> TemplateBook:
        """The book of a service: text normalised as ``config`` says, and the templates
        of ``templates.file``; an invalid file is a :class:`ConfigError` naming the key."""

        def normalise(text: str) -> str:
            return check_text(text, "text", config, limit=10**9)

        book = cls(resolve, normalise, finish, ignore_case=config.text.casefold, read=read)
        if config.templates.file is not None:
            try:
                book.load(config.templates.file)
            except TTSError as exc:
                raise ConfigError(f"templates.file: {exc}") from exc
        return book

    def __len__(self) -> int:
        return len(self._compiled)

    def templates(self) -> list[Template]:
        with self._lock:
            return [c.template for c in self._compiled.values()]

    def load(self, path: str | Path) -> int:
        """Add the templates of a phrase file; a missing file adds none. Raises
        :class:`lib.request.phrases.PhraseFileError` for an invalid one."""
        if not Path(path).is_file():
            _LOGGER.info("no template file at %s; no templates", path)
            return 0
        templates = load_templates(path)
        self.add(templates, caller=LOCAL)  # the configured file: the operator's own setting
        return len(templates)

    def add(self, templates: Iterable[Template], *, caller: Caller) -> None:
        """Enable ``templates`` for every request (replacing those with the same text and
        voice settings). Needs the admin: a template changes other users' answers.
        Raises :class:`PhraseFileError` past :data:`MAX_TEMPLATES`."""
        check(caller, Action.TEMPLATES)
        compiled = [self._compile(t) for t in templates]
        with self._lock:
            after = len(set(self._compiled) | {c.template.id for c in compiled})
            if after > MAX_TEMPLATES:
                raise PhraseFileError(
                    f"the service would hold {after} templates, over the limit of {MAX_TEMPLATES}; every miss is "
                    "matched against each of them: put the ones callers use in templates.file and restart"
                )
            for c in compiled:
                self._compiled[c.template.id] = c

    # -- matching ------------------------------------------------------------------------

    def match(self, r: Resolved) -> Match | None:
        """The template ``r`` can be composed from, with its pieces, or None."""
        if not self._compiled:
            return None
        text = r.fields.text
        settings = dataclasses.replace(r.fields, text="", finish="", reading="")
        with self._lock:
            candidates = list(self._compiled.values())
        for c in candidates:
            if c.broken:
                continue
            base = self._base(c)  # the voice and settings first: a template never sees other voices' texts
            if base is None or settings != base:
                continue
            m = c.regex.fullmatch(text)  # RE2: linear in the text
            if m is None:
                continue
            return Match(c.template, tuple(self._pieces(c, m)))
        return None

    def pieces(self, template: Template) -> list[str]:
        """The normalised texts of the pieces the preload makes for ``template``: those
        of :meth:`lib.compose.templates.Template.pieces`, each listed value of a
        ``text`` slot as :meth:`value_pieces` reads it (what a composed answer asks for)."""
        c = self._compiled.get(template.id) or self._compile(template)
        out: list[str] = []
        for i, part in enumerate(template.parts):
            if i % 2 == 0:
                piece = fixed_piece(c.fixed[i // 2])
                out.extend([piece] if piece else [])
                continue
            slot = template.slots[part]
            if slot.read == "characters":
                out.extend(template.slot_pieces(part, "".join(slot.alphabet())))
            else:
                for value in slot.values:
                    out.extend(self.value_pieces(template, part, value))
        return list(dict.fromkeys(self._normalise(p) for p in out))

    def value_pieces(self, template: Template, name: str, value: str) -> list[str]:
        """The normalised texts of the pieces that say ``value`` of slot ``name``: one
        place for the preload (:meth:`pieces`) and a composed answer (:meth:`match`),
        so that both ask for the same keys. A ``text`` slot's value is read as the
        sentence reads it, between its fixed neighbours ("2" before "点" is 两, not 二;
        "4512" before "次" is 四五幺二): the piece is those words, so it sounds as the
        whole sentence would. ``characters`` and ``number`` slots are read as they say."""
        slot = template.slots[name]
        if slot.read != "text":
            return [self._normalise(text) for text in template.slot_pieces(name, value)]
        text = self._normalise(value)
        if self._read is None:
            return [text]
        c = self._compiled.get(template.id) or self._compile(template)
        at = template.parts.index(name) // 2  # the fixed parts before and after the slot
        return [self._in_context(c.fixed[at], text, c.fixed[at + 1], template) or text]

    def _in_context(self, before: str, value: str, after: str, template: Template) -> str:
        """The words ``value`` is read as between ``before`` and ``after``; "" when a
        word of the reading spans the value's edge (then the value is its own piece)."""
        assert self._read is not None
        sentence = before + value + after
        try:
            reading = self._read(sentence, template.voice, template.language)
        except TTSError:
            return ""
        inside = []
        pos, start, end = 0, len(before), len(before) + len(value)
        for token in reading.tokens:
            at = sentence.find(token.text, pos)
            if at < 0:
                return ""  # the front end changed the text: it cannot be aligned
            pos = at + len(token.text)
            if at >= start and pos <= end:
                inside.append(token)
            elif at < end and pos > start:
                return ""  # one word with the fixed text ("2点" read as one): the value alone
        return Reading(tuple(inside), reading.language).spoken.strip()

    def piece_fields(self, revision: str = "") -> list[tuple[KeyFields, str]]:
        """The key fields of every piece of every template, each with what an operator
        calls it (the piece's text and the template's voice): what the Cache tab counts
        as ready (:class:`lib.ops.upgrade.Readiness`). Kept while the templates and
        ``revision`` (the lexicon's version: an edit re-keys pieces) stay the same."""
        with self._lock:
            compiled = list(self._compiled.values())
            stamp = (tuple(c.template.id for c in compiled), revision)
            if self._fields is not None and self._fields[0] == stamp:
                return self._fields[1]
        fields: dict[str, tuple[KeyFields, str]] = {}
        for c in compiled:
            try:
                for text in self.pieces(c.template):
                    piece = self.piece_request(c.template, text)
                    if piece is not None:
                        label = f"模板片段 template piece「{cut_text(text)}」（{c.template.voice}）"
                        fields.setdefault(piece.key, (piece.fields, label))
            except TTSError as exc:  # a piece this engine cannot say is not counted
                _LOGGER.info("template %s: its pieces are not counted (%s)", c.template.entry, exc)
        out = list(fields.values())
        with self._lock:
            self._fields = (stamp, out)
        return out

    def piece_request(self, template: Template, text: str) -> Resolved | None:
        """The resolved request of one raw piece of ``template`` (None if its voice
        cannot be used by this engine)."""
        c = self._compiled.get(template.id) or self._compile(template)
        base = self._base(c)
        if base is None:
            return None
        resolved = self._resolve(template.request(text))
        fields = dataclasses.replace(resolved.fields, finish="")
        return dataclasses.replace(resolved, fields=fields, key=fields.key)

    def _base(self, c: _Compiled) -> KeyFields | None:
        if c.base is None and not c.broken:
            sample = fixed_piece(c.fixed[0]) or fixed_piece(c.fixed[-1]) or "template"
            try:
                resolved = self._resolve(c.template.request(sample))
            except TTSError as exc:
                _LOGGER.warning("template %s cannot be used here (%s); requests are synthesised whole",
                                c.template.entry, exc)  # fmt: skip
                c.broken = True
                return None
            c.base = dataclasses.replace(resolved.fields, text="", finish="", reading="")
        return c.base

    def _pieces(self, c: _Compiled, m: PatternMatch) -> list[tuple[str, float]]:
        items: list[list[object]] = []  # [text, pause after]
        finish = self.finish

        def pause(seconds: float) -> None:
            if items:
                items[-1][1] = max(float(items[-1][1]), seconds)  # type: ignore[arg-type]

        for i, fixed in enumerate(c.fixed):
            lead = fixed.strip()
            head = lead[: len(lead) - len(lead.lstrip(_ENDS + _CLAUSES + " "))]
            pause(_pause_of(head, finish))
            piece = fixed_piece(fixed)
            if piece:
                items.append([piece, 0.0])
                pause(_pause_of(piece[-1], finish))
            if i + 1 < len(c.fixed):
                name = c.template.parts[2 * i + 1]
                readings = self.value_pieces(c.template, name, m.group(f"s_{name}"))
                for j, text in enumerate(readings):
                    items.append([text, 0.0])
                    if j + 1 < len(readings) and c.template.slots[name].read == "characters":
                        pause(finish.char_gap)
        return [(str(text), float(gap)) for text, gap in items]  # type: ignore[arg-type]

    # -- compiling ----------------------------------------------------------------------

    def _compile(self, template: Template) -> _Compiled:
        """The pattern of ``template`` over normalised text: the fixed parts are
        normalised together (with stand-ins for the slots), so white space and folding
        match what requests get."""
        marked = "".join(part if i % 2 == 0 else chr(_SENTINEL + i // 2) for i, part in enumerate(template.parts))
        normal = self._normalise(marked)
        fixed = re.split("[" + "".join(chr(_SENTINEL + k) for k in range(len(template.parts) // 2)) + "]", normal)
        pattern = ""
        for i, part in enumerate(fixed):
            if i == len(fixed) - 1 and part and part[-1] in _ENDS:
                stem = part.rstrip(_ENDS)
                pattern += re.escape(stem) + f"(?:{re.escape(part[len(stem) :])})?"
            else:
                pattern += re.escape(part)
            if i + 1 < len(fixed):
                name = template.parts[2 * i + 1]
                pattern += f"(?P<s_{name}>{template.slots[name].regex})"
        pieces = [p for p in (fixed_piece(f) for f in fixed) if p]
        if any(len(split(p, self.finish.max_chars)) > 1 for p in pieces):
            _LOGGER.info("template %s has a fixed part of several sentences; it is still one piece", template.entry)
        _LOGGER.debug("template %s: %s", template.entry, cut_text(pattern, 80))
        try:
            regex = compile_pattern(pattern, ignore_case=self._ignore_case)
        except PatternError as exc:  # each slot compiled alone at load; together they may be too big
            raise PhraseFileError(f"{template.entry}: the template's pattern {exc}") from None
        return _Compiled(template, regex, tuple(fixed))


def _pause_of(punctuation: str, finish: Finish) -> float:
    if any(ch in _ENDS for ch in punctuation):
        return finish.pause_sentence
    if any(ch in _CLAUSES for ch in punctuation):
        return finish.pause_clause
    return 0.0
