"""Texts that crash espeak-ng, rewritten before they reach it.

What crashes it (espeak-ng 1.52 as bundled by espeakng-loader 0.2.4, measured by fuzzing
the worker with the real library; the cases are in ``tests/data/espeak_hostile.json``):
a long chain of *spelled letters* -- single letters of any script (or number characters
such as ``ⅷ``, but not the ASCII digits) joined by punctuation,
like an abbreviation that never ends: ``a.a.a.``, ``A.B. A.B.``, ``,ⅷ.,ⅷ.``, ``ж._ж._``,
``.a.a``. espeak reads such a chain as one word spelled letter by letter and overflows a
fixed buffer on the stack: the process aborts ("stack smashing detected", SIGABRT) or
dies of SIGSEGV/SIGBUS. The shortest chains that crashed had 67 letters (Han characters
and Roman numerals, which have long spelled names, in the ``en-us`` voice), 101 for
Cyrillic or Greek letters, 192 for Latin ones; ``"a. " * 333`` becomes such a chain
because sentences of fewer than four letters are joined without their spaces
(:func:`lib.engines.builtin.lang.split_sentences`). Plain long words, digits, symbols,
emoji and random mixtures did not crash it (thousands of generated texts).

The rewrite: after every :data:`CHAIN_LIMIT` spelled letters that no ordinary word
interrupts, a clause break `` , `` goes in before the next one. Measured: that break (a
space before the comma) ends the chain; ``", "``, ``". "``, ``"; "``, a newline or a
space do not always. An ordinary word, two or more letters or digits with white space on
both sides, ends a chain by itself. So a text changes only when it holds more than 32
spelled letters in a row -- which no ordinary text does ("J. R. R. Tolkien" has 3) --
and it is then read with a short pause every 32 letters instead of crashing the engine.
"""

from __future__ import annotations

import logging

__all__ = ["CHAIN_LIMIT", "defuse"]

_LOGGER = logging.getLogger(__name__)

#: Spelled letters allowed in one chain; half the shortest chain that crashed (67).
CHAIN_LIMIT = 32
_BREAK = " , "


def _spelled(text: str, i: int) -> bool:
    """Whether ``text[i]`` is a letter standing alone (no letter or digit beside it)
    that touches punctuation on one side: a letter espeak spells as part of a chain.
    "Letter" is any letter or number character but the ASCII digits (chains of those
    did not crash it; Roman numerals such as ``ⅷ`` did)."""
    ch = text[i]
    if not ch.isalnum() or "0" <= ch <= "9":
        return False
    before = text[i - 1] if i > 0 else " "
    after = text[i + 1] if i + 1 < len(text) else " "
    if before.isalnum() or after.isalnum():
        return False
    return not (before.isspace() and after.isspace())


def _word_ends_at(text: str, i: int) -> bool:
    """Whether an ordinary word (2+ letters or digits, white space or an edge on both
    sides) ends at ``i``: it interrupts any chain."""
    if not text[i].isalnum() or (i + 1 < len(text) and not text[i + 1].isspace()):
        return False
    j = i
    while j > 0 and text[j - 1].isalnum():
        j -= 1
    return i - j >= 1 and (j == 0 or text[j - 1].isspace())


def defuse(text: str) -> str:
    """``text`` with a clause break after every :data:`CHAIN_LIMIT` spelled letters in
    a row; unchanged (the same object) when it has no chain that long."""
    count = 0
    out: list[str] = []
    start = 0
    for i in range(len(text)):
        if _spelled(text, i):
            if count == CHAIN_LIMIT:
                out.append(text[start:i])
                out.append(_BREAK)
                start = i
                count = 0
            count += 1
        elif _word_ends_at(text, i):
            count = 0
    if not out:
        return text
    out.append(text[start:])
    _LOGGER.info("broke a chain of spelled letters espeak-ng cannot read (%d characters)", len(text))
    return "".join(out)
