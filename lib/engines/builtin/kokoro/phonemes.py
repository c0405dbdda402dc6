"""A :class:`lib.text.Reading` in Kokoro's phonemes, sentence by sentence.

Kokoro never reads the raw text: what it says is the reading the text front end decided
(lexicon entries included), token by token:

- ``zh``: each pinyin syllable through misaki 0.9.4's v1.0 Mandarin rules
  (``misaki.zh.ZHG2P.py2ipa``: initials and finals in IPA, the tone as an arrow), the
  syllables of one word joined, words separated by a space -- the form Kokoro v1.0 was
  trained on. Readings carry citation tones; 一 and 不 take their tone sandhi here
  (:func:`sandhi`), as pypinyin's phrase readings gave them in Kokoro's training text.
  Third-tone sandhi is left to the model (its training text had none).
- ``en``: the words of a run of English through espeak-ng's IPA, mapped to Kokoro's
  symbols (:mod:`.english`).
- ``letters``: each letter on its own through espeak-ng (a lone letter is read by its
  name: ``A`` is ``ˈA``, not the article).
- ``pause``: the mark, attached to the word before it (``xau↓,``).

A sentence ends at ``.``, ``?`` or ``!``; a sentence longer than one model call
(:data:`MAX_IDS` ids) is cut at its commas, else between words.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass

from lib.engines.builtin.kokoro.english import from_espeak
from lib.engines.builtin.kokoro.vocab import to_ids
from lib.engines.plausible import NO_BOUNDS, Bounds, units
from lib.text.tokens import Reading, Token

__all__ = ["MAX_IDS", "Sentence", "phonemise", "sandhi", "syllable_ipa"]

_LOGGER = logging.getLogger(__name__)

#: Most phoneme ids per model call. The graph takes 510; cutting long sentences at a
#: clause well below that keeps each call's audio (and its memory) to about 15 s.
MAX_IDS = 300
_SENTENCE_ENDS = frozenset(".?!")
_NUMERALS = frozenset("零〇一二三四五六七八九十两")
_MAGNITUDES = frozenset("百千万亿")
#: A sentence with fewer units than this joins its neighbour (too short to stand alone).
_MIN_UNITS = 3

Ipa = Callable[[list[str]], list[str]]


@dataclass(frozen=True)
class Sentence:
    """One sentence of a reading in Kokoro phonemes."""

    chunks: tuple[str, ...]
    """Phoneme strings, one model call each (most sentences have one)."""
    language: str
    """``zh`` or ``en``: the language of most of its words (picks the voice)."""
    syllables: Bounds = NO_BOUNDS
    """How many syllables its tokens are heard as (its plausible length, lib.engines.plausible)."""


@functools.lru_cache(maxsize=4096)
def syllable_ipa(syllable: str) -> str:
    """Kokoro phonemes of one pinyin syllable with a tone number (``zhong1`` -> ``ʈʂʊ→ŋ``
    in Kokoro's letters); ``""`` for one misaki cannot read."""
    from misaki.zh import ZHG2P

    core = syllable.strip().lower().replace("ü", "v")
    if core == "r" or (core.startswith("r") and core[1:].isdigit()):
        return "ɚ"  # a lone erhua 儿 (written r5 by some readers)
    try:
        return str(ZHG2P.py2ipa(core)).replace("\u032f", "")
    except (ValueError, AssertionError, KeyError, IndexError):
        pass
    tone = core[-1] if core[-1:].isdigit() else ""
    base = core[:-1] if tone else core
    if base.endswith("r") and base != "er" and len(base) > 1:
        # Erhua written into the syllable (huar1): the syllable, then ɚ.
        inner = syllable_ipa(base[:-1] + tone)
        if inner:
            return inner + "ɚ"
    _LOGGER.warning("Kokoro has no phonemes for the pinyin syllable %r; it is left out", syllable[:32])
    return ""


def _chars(token: Token) -> list[str]:
    """The Han character of each syllable of a ``zh`` token ("" where unknown)."""
    units = token.units
    say = [ch for ch in token.say if not ch.isspace()]
    return say if len(say) == len(units) else [""] * len(units)


def sandhi(tokens: list[Token]) -> list[list[str]]:
    """The syllables of each token (``[]`` for other kinds) with 一/不 tone sandhi applied.

    不 bu4 before a fourth tone is bu2. 一 yi1 before a fourth tone is yi2, before another
    tone yi4 -- except as a digit of a number or code (between numerals, after 第, in a
    rule-made reading unless a magnitude 百千万亿 follows) and at the end of a phrase."""
    syllables = [list(t.units) if t.kind == "zh" else [] for t in tokens]
    flat: list[tuple[int, int, str]] = []  # (token, syllable, char); a pause or other kind breaks
    for ti, token in enumerate(tokens):
        if token.kind != "zh":
            flat.append((ti, -1, ""))
            continue
        for si, ch in enumerate(_chars(token)):
            flat.append((ti, si, ch))
    for k, (ti, si, ch) in enumerate(flat):
        if si < 0 or k + 1 >= len(flat) or flat[k + 1][1] < 0:
            continue
        syl = syllables[ti][si]
        nti, nsi, nch = flat[k + 1]
        nxt = syllables[nti][nsi]
        tone = nxt[-1:] if nxt[-1:].isdigit() else "5"
        if syl == "bu4" and ch in ("不", "") and tone == "4":
            syllables[ti][si] = "bu2"
        elif syl == "yi1" and ch == "一" and tone in "1234":
            prev = flat[k - 1][2] if k > 0 else ""
            numeral = prev in _NUMERALS or prev == "第" or nch in _NUMERALS
            if (tokens[ti].source == "rule" and nch not in _MAGNITUDES) or numeral:
                continue
            syllables[ti][si] = "yi2" if tone == "4" else "yi4"
    return syllables


def _split_sentences(tokens: tuple[Token, ...]) -> list[list[Token]]:
    out: list[list[Token]] = []
    current: list[Token] = []
    for token in tokens:
        current.append(token)
        if token.kind == "pause" and token.reading in _SENTENCE_ENDS:
            out.append(current)
            current = []
    if current:
        out.append(current)
    merged: list[list[Token]] = []
    for sentence in out:
        units = sum(len(t.units) for t in sentence)
        if merged and (units < _MIN_UNITS or not any(t.kind != "pause" for t in merged[-1])):
            merged[-1].extend(sentence)
        else:
            merged.append(sentence)
    if len(merged) > 1 and sum(len(t.units) for t in merged[0]) < _MIN_UNITS:
        merged[1] = merged[0] + merged[1]
        del merged[0]
    return [s for s in merged if any(t.kind != "pause" for t in s)]


def _english_items(sentence: list[Token]) -> list[str]:
    """Texts for espeak in order: each run of English words, each letter."""
    items: list[str] = []
    run: list[str] = []
    for token in sentence:
        if token.kind == "en":
            run.extend(token.units)
            continue
        if run:
            items.append(" ".join(run))
            run = []
        if token.kind == "letters":
            items.extend(token.units)
    if run:
        items.append(" ".join(run))
    return items


def _words(sentence: list[Token], ipa: list[str]) -> list[str]:
    """The sentence as Kokoro words (pause marks attached), consuming ``ipa`` in order."""
    words: list[str] = []
    syllables = sandhi(sentence)
    in_run = False
    for token, syls in zip(sentence, syllables, strict=True):
        if token.kind == "en":
            if not in_run:
                words.extend(from_espeak(ipa.pop(0)).split())
            in_run = True
            continue
        in_run = False
        if token.kind == "zh":
            word = "".join(syllable_ipa(s) for s in syls)
            if word:
                words.append(word)
        elif token.kind == "letters":
            words.extend(w for w in (from_espeak(ipa.pop(0)) for _ in token.units) if w)
        elif token.kind == "pause" and token.reading:
            mark = token.reading[0]
            if words and words[-1][-1] not in ",.?!":
                words[-1] += mark
    return words


def _chunks(words: list[str], limit: int) -> list[str]:
    """Words joined into phoneme strings of at most ``limit`` ids, cut at commas first."""
    clauses: list[list[str]] = [[]]
    for word in words:
        clauses[-1].append(word)
        if word.endswith(","):
            clauses.append([])
    out: list[str] = []
    current: list[str] = []
    for clause in (c for c in clauses if c):
        if len(to_ids(" ".join(current + clause))) <= limit:
            current += clause
            continue
        if current:
            out.append(" ".join(current))
            current = []
        for word in clause:  # a clause too long on its own: cut between words
            if current and len(to_ids(" ".join([*current, word]))) > limit:
                out.append(" ".join(current))
                current = []
            current.append(word[: limit * 2])
    if current:
        out.append(" ".join(current))
    return [c for c in out if to_ids(c)]


def _language(sentence: list[Token], default: str) -> str:
    zh = sum(len(t.units) for t in sentence if t.kind == "zh")
    en = sum(len(t.units) for t in sentence if t.kind == "en")
    if zh == en:
        return default if default in ("zh", "en") else "zh"
    return "zh" if zh > en else "en"


def phonemise(reading: Reading, ipa: Ipa, *, limit: int = MAX_IDS) -> list[Sentence]:
    """The reading's sentences in Kokoro phonemes. ``ipa`` is espeak-ng's IPA of a list
    of English texts (``EspeakSynth.ipa``): called once for the whole reading."""
    sentences = _split_sentences(reading.tokens)
    items = [_english_items(s) for s in sentences]
    flat = ipa([i for group in items for i in group]) if any(items) else []
    out: list[Sentence] = []
    at = 0
    for sentence, group in zip(sentences, items, strict=True):
        mine = flat[at : at + len(group)]
        at += len(group)
        chunks = _chunks(_words(sentence, list(mine)), limit)
        if chunks:
            out.append(Sentence(tuple(chunks), _language(sentence, reading.language), units(sentence)))
    return out
