"""Voice names that cannot pass for another voice.

Voice names are shared by every user and shown side by side in one dropdown, so a name
must not *look* like another one: ``еn-female`` with a Cyrillic ``е``, a fullwidth
``ｅｎ-female`` or ``ﬁ`` for ``fi`` would otherwise be saved beside the preset they copy,
and a user picking by eye would speak in the copy. Three rules, in the spirit of
Unicode TR39 (Security Mechanisms):

1. a name is **NFKC-normalised** before anything else: fullwidth forms and ligatures
   become the letters they stand for, and the normalised name is what is saved;
2. it must not mix **Latin, Cyrillic or Greek** letters with each other (or with another
   alphabet): one such alphabet per name, plus any of Han, kana, Hangul and Bopomofo
   ("张三 voice" is fine, "pаypal" is not) -- TR39's "highly restrictive" level, which
   stops a look-alike from being saved *before* the name it copies;
3. its **skeleton** must differ from that of every preset and saved voice: each
   character is replaced by a prototype of its class of look-alikes (``е`` and ``e``,
   ``0`` and ``O``, ``1``, ``I`` and ``l``, ``rn`` and ``m``), and two names with one
   skeleton are confusable.

The look-alike classes come from Unicode's confusables data (confusables.txt) as
packaged by ``confusable-homoglyphs`` on PyPI (pinned in requirements.txt), read once
on first use.
"""

from __future__ import annotations

import functools
import importlib
import logging
import re
import string
import unicodedata
from collections.abc import Iterable
from typing import Any

__all__ = ["confusable_with", "folded", "mixed_scripts", "normalise_name", "skeleton"]

_LOGGER = logging.getLogger(__name__)

#: Alphabets that may not be mixed with each other in one name (their letters look alike).
_ALPHABETS = frozenset({"LATIN", "CYRILLIC", "GREEK"})
#: Scripts that may join one alphabet (TR39's highly restrictive combinations).
_CJK = frozenset({"HAN", "HIRAGANA", "KATAKANA", "HANGUL", "BOPOMOFO"})
_NEUTRAL = frozenset({"COMMON", "INHERITED"})
_ASCII = frozenset(string.ascii_letters + string.digits)
_BIDI_MARKS = "\u200e\u200f"  # the data wraps right-to-left characters in these


def normalise_name(name: str) -> str:
    """NFKC, trimmed: the form a name is compared and saved in."""
    return unicodedata.normalize("NFKC", name).strip()


def mixed_scripts(name: str) -> list[str]:
    """The scripts of ``name`` if it mixes letters that can pass for each other (see the
    module docstring), else []."""
    categories: Any = importlib.import_module("confusable_homoglyphs.categories")
    scripts = {str(s) for s in categories.unique_aliases(name)} - _NEUTRAL
    alphabets = scripts - _CJK
    if len(alphabets) > 1 or (alphabets - _ALPHABETS and scripts & _ALPHABETS):
        return sorted(s.title() for s in scripts)
    return []


def skeleton(name: str) -> str:
    """TR39-style skeleton: every character replaced by the prototype of its look-alike
    class; two names with the same skeleton are confusable."""
    table, sequences = _tables()
    text = unicodedata.normalize("NFD", normalise_name(name))
    mapped = "".join(table.get(ch, ch) for ch in text)
    for sequence, prototype in sequences:
        mapped = mapped.replace(sequence, prototype)
    return unicodedata.normalize("NFD", mapped)


_SEPARATORS = re.compile(r"[\s_.\-]+")


def folded(name: str) -> str:
    """The skeleton of ``name`` in one case with one separator: ``EN-FEMALE``,
    ``En-female``, ``en_female`` and ``en.female`` are one name to a listener and to a
    caller typing it."""
    return _SEPARATORS.sub("-", skeleton(normalise_name(name).casefold()).casefold())


def confusable_with(name: str, others: Iterable[str]) -> str | None:
    """The first of ``others`` that ``name`` is not but looks like (the same skeleton, or
    the same one case- and separator-folded), or None."""
    mine, mine_folded = skeleton(name), folded(name)
    for other in others:
        if other != name and (skeleton(other) == mine or folded(other) == mine_folded):
            return other
    return None


@functools.cache
def _tables() -> tuple[dict[str, str], list[tuple[str, str]]]:
    """(character -> prototype, [(ASCII sequence, the ASCII letter it passes for)]).

    The package lists, for each character, the characters and sequences it can be
    confused with; the single characters are joined into classes (union-find) whose
    prototype is their smallest ASCII member, else their smallest member. A character
    whose look-alike is a sequence of ASCII letters (``æ``: ``ae``) maps to that
    sequence, and the few ASCII letters that pass for a sequence (``m``: ``rn``) turn
    that sequence into the letter, so ``corn`` and ``com`` meet."""
    confusables: Any = importlib.import_module("confusable_homoglyphs.confusables")
    data: dict[str, list[dict[str, str]]] = confusables.confusables_data
    parent: dict[str, str] = {}

    def find(ch: str) -> str:
        while parent.get(ch, ch) != ch:
            parent[ch] = parent.get(parent[ch], parent[ch])
            ch = parent[ch]
        return ch

    def rank(ch: str) -> tuple[bool, str]:
        return ch not in _ASCII, ch

    expansions: dict[str, str] = {}
    sequences: dict[str, str] = {}
    for char, alikes in data.items():
        for alike in alikes:
            other = alike["c"].strip(_BIDI_MARKS)
            if len(other) == 1 and len(char) == 1:
                a, b = find(char), find(other)
                if a != b:
                    low, high = sorted((a, b), key=rank)
                    parent[high] = low
            elif len(other) > 1 and all(c in _ASCII for c in other):
                if char in _ASCII:
                    sequences[other] = char
                else:
                    expansions.setdefault(char, other)
    table = {ch: find(ch) for ch in parent}
    for ch in list(table):
        if table[ch] == ch:
            del table[ch]
    for char, sequence in expansions.items():
        if find(char) not in _ASCII:
            table[char] = sequence
    _LOGGER.debug("confusables: %d characters, %d sequences", len(table), len(sequences))
    return table, sorted(sequences.items(), key=lambda kv: -len(kv[0]))
