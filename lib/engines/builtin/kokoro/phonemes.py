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

A sentence ends at ``.``, ``?`` or ``!``. It is said in *pieces*, one model call each, so
that a streamed sentence starts to sound before it is all made (:func:`pieces`): a
sentence of up to :data:`WHOLE_IDS` ids is one piece; a longer one starts with a piece of
at most :data:`FIRST_IDS` ids (about 1-1.5 s of speech, made in about a second), and each
later piece may be twice as long as the one before (up to :data:`MAX_IDS`), so that each
is made while the ones before it play. Pieces end at commas where a clause fits, else
between words (never leaving a remainder under :data:`MIN_PIECE_IDS` ids). A piece that
ends at a comma joins the next with the clause's pause; a piece cut between words joins
it tightly (:mod:`.render`).
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

__all__ = [
    "FIRST_IDS",
    "MAX_IDS",
    "MIN_PIECE_IDS",
    "WHOLE_IDS",
    "Sentence",
    "phonemise",
    "pieces",
    "sandhi",
    "syllable_ipa",
]

_LOGGER = logging.getLogger(__name__)

#: Most phoneme ids per model call. The graph takes 510; cutting long sentences at a
#: clause well below that keeps each call's audio (and its memory) to about 15 s.
MAX_IDS = 300
#: A sentence of at most this many ids is one piece (about 2.5 s of speech: splitting it
#: would save little time and add a join).
WHOLE_IDS = 45
#: Most ids of a longer sentence's first piece: what a listener waits for. A call has a
#: fixed cost (about 0.6 s here) besides its length: 26 ids took 1.1 s, 86 ids 2.1 s.
FIRST_IDS = 30
#: No piece but a whole sentence is shorter (a call's fixed cost for a word or two).
MIN_PIECE_IDS = 12
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
    """Phoneme strings, one model call each (:func:`pieces`); one ending in ``,`` ends a
    clause, any other but the last was cut between words."""
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


def _words(sentence: list[Token], ipa: list[str]) -> tuple[list[str], list[bool]]:
    """The sentence as Kokoro words (pause marks attached), consuming ``ipa`` in order;
    and for each word whether a piece may start at it: not right after a letter or a
    number's reading (a code such as G4512 or A001 and its measure word 号, 次 stay in one
    piece)."""
    words: list[str] = []
    breaks: list[bool] = []
    syllables = sandhi(sentence)
    in_run = False
    glued = False  # the last word was a letter or a number

    def add(new: list[str], code: bool) -> None:
        nonlocal glued
        for word in new:
            breaks.append(not glued)
            words.append(word)
            glued = code

    for token, syls in zip(sentence, syllables, strict=True):
        code = token.kind == "letters" or token.source == "rule"
        if token.kind == "en":
            if not in_run:
                add(from_espeak(ipa.pop(0)).split(), False)
            in_run = True
            continue
        in_run = False
        if token.kind == "zh":
            word = "".join(syllable_ipa(s) for s in syls)
            if word:
                add([word], code)
        elif token.kind == "letters":
            add([w for w in (from_espeak(ipa.pop(0)) for _ in token.units) if w], True)
        elif token.kind == "pause" and token.reading:
            mark = token.reading[0]
            if words and words[-1][-1] not in ",.?!":
                words[-1] += mark
            glued = False
    return words, breaks


def _n(words: list[str]) -> int:
    return len(to_ids(" ".join(words)))


def pieces(
    words: list[str], limit: int = MAX_IDS, first: int = FIRST_IDS, breaks: list[bool] | None = None
) -> list[str]:
    """A sentence's words (pause marks attached) as phoneme strings, one model call each:
    the first of at most ``first`` ids, each later one at most twice its predecessor's
    budget and ``limit``; whole clauses (cut at commas) where they fit, else cut between
    words where ``breaks`` allows (a piece may start at word i if ``breaks[i]``; a
    clause with no allowed cut that fits is kept whole), never making a piece under
    :data:`MIN_PIECE_IDS` ids of a clause."""
    allowed = list(breaks) if breaks is not None else [True] * len(words)
    kept = [(w[: limit * 2], b) for w, b in zip(words, allowed, strict=True) if w]  # a word longer than a call: cut
    words, allowed = [w for w, _ in kept], [b for _, b in kept]
    if not words:
        return []
    if _n(words) <= min(limit, max(first, WHOLE_IDS)):
        return [" ".join(words)]
    clauses: list[list[int]] = [[]]
    for i, word in enumerate(words):
        clauses[-1].append(i)
        if word.endswith(","):
            clauses.append([])
    queue = [c for c in clauses if c]

    def ids(at: list[int]) -> int:
        return _n([words[i] for i in at])

    out: list[list[int]] = []
    current: list[int] = []
    budget = first
    while queue:
        clause = queue.pop(0)
        if ids(current + clause) <= budget:
            current += clause
            continue
        if current:
            out.append(current)
            current, budget = [], min(limit, budget * 2)
            queue.insert(0, clause)
            continue
        # A clause over the budget on its own: cut it between words, at the last allowed
        # place within the budget that leaves enough for a call of its own.
        cuts = [
            c for c in range(1, len(clause))
            if allowed[clause[c]] and min(ids(clause[:c]), ids(clause[c:])) >= MIN_PIECE_IDS
        ]  # fmt: skip
        within = [c for c in cuts if ids(clause[:c]) <= budget]
        if within:
            cut = within[-1]
        elif cuts and ids(clause) > limit:
            cut = cuts[0]
        elif ids(clause) <= limit:
            cut = len(clause)  # no allowed place: the clause whole
        else:  # pragma: no cover - a clause over a call with no allowed cut: by length
            cut = max(1, next((c for c in range(1, len(clause)) if ids(clause[: c + 1]) > limit), len(clause)))
        out.append(clause[:cut])
        budget = min(limit, budget * 2)
        if clause[cut:]:
            queue.insert(0, clause[cut:])
    if current:
        out.append(current)
    if len(out) > 2 and ids(out[-1]) < MIN_PIECE_IDS and ids(out[-2] + out[-1]) <= limit:
        out[-2:] = [out[-2] + out[-1]]  # a last word or two: with the piece before
    return [s for s in (" ".join(words[i] for i in p) for p in out) if to_ids(s)]


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
        words, breaks = _words(sentence, list(mine))
        chunks = pieces(words, limit, breaks=breaks)
        if chunks:
            out.append(Sentence(tuple(chunks), _language(sentence, reading.language), units(sentence)))
    return out
