"""How a template slot's value is spoken: the texts of the pieces that say it.

- ``characters``: one piece per character, a code read out: ``A023`` is ``A 零 二 三``
  in Chinese and ``A zero two three`` in English. Letters stay letters (the engine says
  their names), digits become words, so "023" is never read as "twenty-three".
- ``number``: the value as one number: ``12`` is ``十二`` / ``twelve``, ``3.5`` is
  ``三点五`` / ``three point five``.
- ``text``: the value as written, one piece (the engine reads it as it would anywhere).

Readings are computed, never synthesised here; the pieces are plain text, so the same
reading made by the preload and by a request is the same cache key.
"""

from __future__ import annotations

import logging
import re

from lib.text.numbers import EN_DIGITS, ZH_DIGITS, en_int, zh_int

__all__ = ["LANGUAGES", "NUMBER_RE", "READS", "is_number", "read"]

_LOGGER = logging.getLogger(__name__)

READS = ("characters", "number", "text")
LANGUAGES = ("zh", "en")

#: A value that ``number`` can read: digits with an optional decimal part, up to 10^12.
NUMBER_RE = re.compile(r"^[0-9]{1,12}(?:\.[0-9]{1,6})?$")

_ZH_DIGITS = ZH_DIGITS
_EN_DIGITS = EN_DIGITS


def is_number(value: str) -> bool:
    return bool(NUMBER_RE.match(value))


def read(value: str, how: str, language: str) -> list[str]:
    """The piece texts that speak ``value``; ``how`` in :data:`READS`."""
    if how == "characters":
        return [character(ch, language) for ch in value if not ch.isspace()]
    if how == "number":
        if not is_number(value):
            raise ValueError(f"{value!r} is not a number")
        return [number(value, language)]
    if how == "text":
        return [value]
    raise ValueError(f"unknown reading {how!r}; use one of {', '.join(READS)}")


def character(ch: str, language: str) -> str:
    """One character as a piece: a digit as its word, anything else as itself."""
    if "0" <= ch <= "9":
        return _ZH_DIGITS[int(ch)] if language == "zh" else _EN_DIGITS[int(ch)]
    return ch


def number(value: str, language: str) -> str:
    """``value`` (see :data:`NUMBER_RE`) as words."""
    whole, _, fraction = value.partition(".")
    n = int(whole)
    if language == "zh":
        text = zh_int(n)
        if fraction:
            text += "点" + "".join(_ZH_DIGITS[int(d)] for d in fraction)
        return text
    text = en_int(n)
    if fraction:
        text += " point " + " ".join(_EN_DIGITS[int(d)] for d in fraction)
    return text
