"""The reading of a text: the one way text reaches an engine.

The text front end (:mod:`lib.text`) turns a normalised text into a :class:`Reading`:
a sequence of :class:`Token`, one per word (a jieba word, a lexicon term, a number, a
code, an English word, a run of letters) or pause mark. Every engine speaks the
reading in its own syntax -- espeak-ng phonemes, Kokoro phonemes, CosyVoice text with
inline pinyin -- and never reads the raw text itself, so a reading fixed in the lexicon
is what every engine says.

Reading tokens follow the conventions of ``readings-dev.tsv`` (``../shared/testdata``):

- Mandarin: pinyin syllables with tone numbers 1-5, ``v`` for ü, citation tones (no
  third-tone sandhi; 一 and 不 sandhi are the engine's business), e.g. ``chang2 sha1``;
- Latin letters read as letters: upper case, one per syllable, e.g. ``I D``;
- English words: lower case, e.g. ``twelve dollars``;
- a pause: its mark, one of ``, . ? !``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["KINDS", "PAUSES", "SOURCES", "Reading", "Token"]

#: What a token is: Mandarin syllables, English words, Latin letters, or a pause.
KINDS = ("zh", "en", "letters", "pause")
#: Where a token's reading came from, strongest first: the operator's lexicon, the
#: lexicon shipped with the app, a normalisation rule (numbers, codes, dates...), the
#: reading model (dictionary and polyphone decisions), or the text itself (pauses).
SOURCES = ("lexicon", "shipped", "rule", "model", "text")
#: Pause marks: a clause pause and three sentence ends.
PAUSES = (",", ".", "?", "!")


@dataclass(frozen=True, slots=True)
class Token:
    """One word (or pause) of a reading."""

    text: str
    """The stretch of the normalised input this token reads, as written: ``长沙``,
    ``2024``, ``ID``, ``$12``, ``，``."""
    reading: str
    """What is said, space-separated reading units (see the module's conventions):
    ``chang2 sha1``, ``er4 ling2 er4 si4``, ``I D``, ``twelve dollars``, or the pause
    mark for a pause."""
    kind: str
    """One of :data:`KINDS`."""
    source: str
    """One of :data:`SOURCES`."""
    spoken: str = ""
    """The same words as plain text, for engines that read text: Han characters for
    ``zh`` (``二零二四``, ``幺二零``; one character per syllable), the words for ``en``,
    the letters for ``letters``, the original mark for a pause. Empty means ``text``."""
    pinned: bool = False
    """The reading is a decision a text-reading engine may get wrong (a lexicon entry,
    a polyphone decided in context, 幺 for 1): engines that can take an explicit
    pronunciation should be given this one."""

    @property
    def units(self) -> list[str]:
        """The reading units: syllables, words or letters (``[]`` for a pause)."""
        return [] if self.kind == "pause" else self.reading.split()

    @property
    def say(self) -> str:
        """:attr:`spoken`, or :attr:`text` where it is empty."""
        return self.spoken or self.text


@dataclass(frozen=True, slots=True)
class Reading:
    """A text's reading: its tokens in order, and what made them."""

    tokens: tuple[Token, ...]
    language: str = "zh"
    """The text's main language, ``zh`` or ``en`` (a token's ``kind`` says its own)."""
    version: str = ""
    """The front end's version and the digest of the lexicon entries applied: the part
    of the cache key this reading adds to the text."""

    @property
    def reading(self) -> str:
        """Space-separated reading units, pauses left out: the ``readings-dev.tsv`` format."""
        return " ".join(t.reading for t in self.tokens if t.kind != "pause" and t.reading)

    @property
    def spoken(self) -> str:
        """The reading as plain text: Han characters joined without spaces, words and
        letters separated by one space, pause marks kept."""
        out: list[str] = []
        prev = ""
        for t in self.tokens:
            say = t.say
            if not say:
                continue
            if out and t.kind != "pause" and not (t.kind == "zh" and prev in ("zh", "pause")):
                out.append(" ")
            out.append(say)
            prev = t.kind
        return "".join(out)
