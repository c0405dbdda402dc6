"""The text front end: a text and a voice in, a :class:`Reading` out.

Order of work for one text (already normalised by :mod:`lib.text.normalise`):

1. the operator's lexicon: every entry that applies to the voice, matched
   leftmost-longest (a voice-scoped entry wins over a global one);
2. between those: normalisation by context (:mod:`lib.text.normalise_zh` or
   :mod:`lib.text.normalise_en`, by the text's language) -- numbers, codes, dates,
   letters;
3. what is left: the Mandarin reader (:mod:`lib.text.mandarin`), which keeps shipped
   lexicon terms whole and decides polyphones by word and context.

:meth:`FrontEnd.read` is memoised per (text, voice, language, lexicon version), LRU
bounded; :meth:`FrontEnd.key_part` needs no reading at all (a term scan).
"""

from __future__ import annotations

import logging
import threading
import unicodedata
from collections import OrderedDict
from pathlib import Path

from lib.text.lexicon import Lexicon, LexiconEntry, shipped_entries
from lib.text.mandarin import MandarinReader
from lib.text.normalise import normalise_text
from lib.text.normalise_en import normalise_en
from lib.text.normalise_zh import Piece, normalise_zh
from lib.text.scan import TermIndex, frontend_version
from lib.text.syllables import is_han, unit_kind
from lib.text.tokens import Reading, Token

__all__ = ["FrontEnd", "detect_language", "mandarin_reader"]

_LOGGER = logging.getLogger(__name__)

#: Latin letters that have no decomposition into a base letter and marks.
_LATIN_SPELLED = {"ß": "ss", "ẞ": "SS", "æ": "ae", "Æ": "AE", "œ": "oe", "Œ": "OE", "ø": "o", "Ø": "O",
                  "ł": "l", "Ł": "L", "đ": "d", "Đ": "D", "ı": "i"}  # fmt: skip


def fold_latin(text: str) -> str:
    """Latin letters with diacritics as their base letters (``café`` -> ``cafe``, ``Zoë`` ->
    ``Zoe``): the rules read ASCII Latin words, and a letter they do not know would be
    dropped from the middle of a word. Other scripts are left alone."""
    if text.isascii():
        return text
    out: list[str] = []
    for ch in text:
        if ch.isascii() or not unicodedata.name(ch, "").startswith("LATIN"):
            out.append(ch)
        elif ch in _LATIN_SPELLED:
            out.append(_LATIN_SPELLED[ch])
        else:
            base = "".join(c for c in unicodedata.normalize("NFKD", ch) if not unicodedata.combining(c))
            out.append(base if base.isascii() else ch)
    return "".join(out)


def mandarin_reader(cache_dir: str | Path | None = None) -> MandarinReader:
    """A Mandarin reader that keeps the shipped lexicon's terms whole (not loaded yet)."""
    return MandarinReader(cache_dir, {e.term: e.reading for e in shipped_entries()})


def detect_language(text: str) -> str:
    """``zh`` if the text has a Han character; ``en`` if it has Latin letters and no Han;
    ``zh`` for the rest (digits and symbols only: the app's announcements are Chinese
    first; a caller that knows better passes ``language``)."""
    if any(is_han(ch) for ch in text):
        return "zh"
    return "en" if any(ch.isascii() and ch.isalpha() for ch in text) else "zh"


class FrontEnd:
    """Normalisation, lexicon and reading for every engine; thread-safe."""

    def __init__(
        self,
        lexicon: Lexicon | None = None,
        *,
        cache_dir: str | Path | None = None,
        memo_size: int = 4096,
        reader: MandarinReader | None = None,
    ) -> None:
        """``lexicon``: the operator's (edited in place through its own methods; the
        front end follows its :attr:`~Lexicon.version`). ``cache_dir``: a private
        directory for jieba's dictionary cache (the app passes its cache directory).
        ``reader``: a Mandarin reader to share (made with :func:`mandarin_reader`):
        its model is read-only once loaded, so the services of one process load it once."""
        self.lexicon = lexicon if lexicon is not None else Lexicon()
        self.version = frontend_version()
        self._shipped = {e.term: e for e in shipped_entries()}
        self._reader = reader if reader is not None else mandarin_reader(cache_dir)
        self._memo: OrderedDict[tuple[str, str | None, str, str], Reading] = OrderedDict()
        self._memo_size = memo_size
        self._lock = threading.Lock()
        self._index: tuple[str, TermIndex] | None = None

    def warm(self) -> None:
        """Load the reading model now rather than on the first read."""
        self._reader.warm()

    def _term_index(self) -> TermIndex:
        version = self.lexicon.version
        index = self._index
        if index is None or index[0] != version:
            with self._lock:
                index = self._index
                if index is None or index[0] != version:
                    index = (version, TermIndex(self.lexicon.snapshot()))
                    self._index = index
        return index[1]

    def key_part(self, text: str, voice: str | None = None) -> str:
        """What the cache key needs from the front end for ``text`` in ``voice``:
        its version and the digest of the operator entries whose terms occur in the
        text. Microseconds: a term scan, no reading."""
        return f"{self.version}:{self._term_index().digest(text, voice)}"

    def read(self, text: str, *, voice: str | None = None, language: str | None = None) -> Reading:
        """The reading of ``text`` as ``voice`` will say it."""
        text = fold_latin(normalise_text(text))
        lang = language or detect_language(text)
        if lang not in ("zh", "en"):
            lang = "zh" if lang.startswith(("zh", "cmn")) else "en"
        key = (text, voice, lang, self.lexicon.version)
        with self._lock:
            hit = self._memo.get(key)
            if hit is not None:
                self._memo.move_to_end(key)
                return hit
        index = self._term_index()
        reading = Reading(tuple(self._tokens(text, voice, lang, index)), lang, self.key_part(text, voice))
        with self._lock:
            self._memo[key] = reading
            while len(self._memo) > self._memo_size:
                self._memo.popitem(last=False)
        return reading

    def _tokens(self, text: str, voice: str | None, lang: str, index: TermIndex) -> list[Token]:
        out: list[Token] = []
        pos = 0
        for start, end, entry in index.matches(text, voice):
            out.extend(self._read_span(text, pos, start, lang))
            out.append(lexicon_token(text[start:end], entry, "lexicon"))
            pos = end
        out.extend(self._read_span(text, pos, len(text), lang))
        return out

    def _read_span(self, text: str, start: int, end: int, lang: str) -> list[Token]:
        if start >= end:
            return []
        pieces: list[Piece] = normalise_zh(text, start, end) if lang == "zh" else normalise_en(text, start, end)
        out: list[Token] = []
        for piece in pieces:
            if isinstance(piece, Token):
                out.append(piece)
            else:
                out.extend(self._reader.read(text, piece[0], piece[1]))
        return out


def lexicon_token(text: str, entry: LexiconEntry, source: str) -> Token:
    """The token of a lexicon entry: its kind from its units (syllables make it
    ``zh``; only letters, ``letters``; only words, ``en``)."""
    kinds = {unit_kind(u) for u in entry.reading.split()}
    kind = "zh" if "syllable" in kinds else ("letters" if kinds == {"letter"} else "en")
    return Token(text, entry.reading, kind, source, text, True)
