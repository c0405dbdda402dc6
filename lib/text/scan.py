"""The term scan for the cache key, and the front end's version.

What an engine is given is a function of the text, the front end's version and the
lexicon entries that apply to the text. :class:`TermIndex` finds those entries with one
Aho-Corasick pass (pyahocorasick: a C automaton over every operator term) -- a few
microseconds for an announcement, no word segmentation and no reading model -- so the
key can cover them on the hit path, and a lexicon change re-keys exactly the texts
that contain a changed term.

A term "occurs" in a text when it is a substring of it. The reading applies an entry
only where it matches leftmost-longest, so the digest can cover an entry that the
reading did not use (六安 inside 六安全): the key is then finer than needed, never
coarser.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lib.text.lexicon import LexiconEntry

__all__ = ["REVISION", "TermIndex", "data_hash", "frontend_version"]

_LOGGER = logging.getLogger(__name__)

#: Bump when the front end's code changes what it reads for some text (rules,
#: polyphone rules, token boundaries). Shipped data files and the reading packages'
#: versions are hashed into :func:`frontend_version` on their own.
REVISION = 3  # 3: numbers of any length (digit by digit past 16 digits), ranges, fractions (issue 31)
#  2: Latin letters with diacritics read as their base letters (café), not dropped

_DATA = Path(__file__).with_name("data")


@functools.cache
def frontend_version() -> str:
    """``text<REVISION>-<hash>``: the hash covers every shipped data file and the
    versions of jieba and pypinyin, whose dictionaries decide readings."""
    h = hashlib.sha256(data_hash(_DATA).encode())
    for package in ("jieba", "pypinyin"):
        try:
            version = importlib.metadata.version(package)
        except importlib.metadata.PackageNotFoundError:
            version = "absent"
        h.update(f"{package}={version}\0".encode())
    return f"text{REVISION}-{h.hexdigest()[:12]}"


def data_hash(directory: Path) -> str:
    """A hash of every file in ``directory`` (names and contents)."""
    h = hashlib.sha256()
    for path in sorted(directory.iterdir()):
        if path.is_file():
            h.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


class TermIndex:
    """An Aho-Corasick automaton over the terms of a set of lexicon entries."""

    def __init__(self, entries: Iterable[LexiconEntry]) -> None:
        import ahocorasick

        self._by_term: dict[str, dict[str | None, LexiconEntry]] = {}
        for e in entries:
            self._by_term.setdefault(e.term, {})[e.voice] = e
        self._automaton: Any = None
        if self._by_term:
            automaton = ahocorasick.Automaton()
            for term in self._by_term:
                automaton.add_word(term, term)
            automaton.make_automaton()
            self._automaton = automaton

    def _applicable(self, term: str, voice: str | None) -> LexiconEntry | None:
        scoped = self._by_term[term]
        if voice is not None and voice in scoped:
            return scoped[voice]
        return scoped.get(None)

    def found(self, text: str, voice: str | None = None) -> list[LexiconEntry]:
        """The entries that apply to ``voice`` whose terms occur in ``text``, sorted."""
        if self._automaton is None:
            return []
        terms = {term for _end, term in self._automaton.iter(text)}
        out = [e for e in (self._applicable(t, voice) for t in terms) if e is not None]
        return sorted(out, key=lambda e: e.term)

    def digest(self, text: str, voice: str | None = None) -> str:
        """A digest of :meth:`found` (``-`` when no entry applies): equal for two
        lexicons that agree on every entry that occurs in ``text``."""
        found = self.found(text, voice)
        if not found:
            return "-"
        lines = "\n".join(f"{e.term}\t{e.reading}" for e in found)
        return hashlib.sha256(lines.encode("utf-8")).hexdigest()[:16]

    def matches(self, text: str, voice: str | None = None) -> list[tuple[int, int, LexiconEntry]]:
        """Where entries apply: ``(start, end, entry)``, leftmost-longest, not overlapping."""
        if self._automaton is None:
            return []
        spans: list[tuple[int, int, LexiconEntry]] = []
        for end, term in self._automaton.iter(text):
            entry = self._applicable(term, voice)
            if entry is not None:
                spans.append((end + 1 - len(term), end + 1, entry))
        spans.sort(key=lambda s: (s[0], -s[1]))
        out: list[tuple[int, int, LexiconEntry]] = []
        pos = 0
        for start, end, entry in spans:
            if start >= pos:
                out.append((start, end, entry))
                pos = end
        return out
