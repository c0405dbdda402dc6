"""A reading cut up for the espeak base: sentences, and in each, runs of one voice.

The espeak base speaks sentence by sentence (each sentence is matched to the prompt on
its own) and, inside a sentence, in runs of one language: Mandarin syllables as espeak-ng
phoneme input in the ``cmn`` voice, English words and letters as text in the ``en-us``
voice (:func:`lib.text.espeak_input.espeak_input` writes both). As for raw text
(:func:`lib.engines.builtin.lang.split_sentences`), a sentence of fewer than four
reading units is joined to its neighbour: each call then carries enough voiced speech
for a stable pitch measurement, and a text of hundreds of one-letter sentences is a few
calls, not hundreds. The engine gives English runs to espeak-ng through
:func:`lib.engines.builtin.defuse.defuse` like any text (long chains of spelled letters
crash it); phoneme input is built from checked pinyin units only.
"""

from __future__ import annotations

from collections.abc import Sequence

from lib.text.espeak_input import espeak_input
from lib.text.tokens import Reading, Token

__all__ = ["Run", "espeak_runs", "espeak_sentences"]

Run = tuple[str, str, bool]
"""One espeak-ng call: (espeak language, input, whether the input holds ``[[phonemes]]``)."""

#: A sentence with fewer reading units (syllables, words, letters) joins its neighbour.
_MIN_UNITS = 4
_SENTENCE_ENDS = (".", "?", "!")


def _units(tokens: Sequence[Token]) -> int:
    return sum(len(t.units) for t in tokens)


def espeak_sentences(reading: Reading) -> list[list[Token]]:
    """The reading's tokens cut after each sentence end; short sentences merged."""
    groups: list[list[Token]] = [[]]
    for token in reading.tokens:
        groups[-1].append(token)
        if token.kind == "pause" and token.reading in _SENTENCE_ENDS:
            groups.append([])
    merged: list[list[Token]] = []
    for group in groups:
        if merged and _units(group) < _MIN_UNITS:
            merged[-1].extend(group)
        elif group:
            merged.append(group)
    if len(merged) > 1 and _units(merged[0]) < _MIN_UNITS:
        merged[1] = merged[0] + merged[1]
        del merged[0]
    return [group for group in merged if _units(group) > 0]


def espeak_runs(tokens: Sequence[Token], version: str = "") -> list[Run]:
    """One sentence's tokens as runs of one voice; pauses stay in the run they follow."""
    runs: list[Run] = []
    group: list[Token] = []
    mandarin: bool | None = None
    for token in tokens:
        if token.kind != "pause":
            is_zh = token.kind == "zh"
            if mandarin is not None and is_zh != mandarin:
                runs += _run(group, mandarin, version)
                group = []
            mandarin = is_zh
        group.append(token)
    if mandarin is not None:
        runs += _run(group, mandarin, version)
    return runs


def _run(tokens: list[Token], mandarin: bool, version: str) -> list[Run]:
    said = espeak_input(Reading(tuple(tokens), "zh" if mandarin else "en", version))
    if not said.text.strip():
        return []
    if mandarin:
        return [("cmn", said.text, said.phonemes)]
    return [("en-us", said.text, False)]
