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

__all__ = ["LANGUAGES", "NUMBER_RE", "READS", "is_number", "read"]

_LOGGER = logging.getLogger(__name__)

READS = ("characters", "number", "text")
LANGUAGES = ("zh", "en")

#: A value that ``number`` can read: digits with an optional decimal part, up to 10^12.
NUMBER_RE = re.compile(r"^[0-9]{1,12}(?:\.[0-9]{1,6})?$")

_ZH_DIGITS = "零一二三四五六七八九"
_EN_DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
_EN_TEENS = (
    "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
)  # fmt: skip
_EN_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")


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
        text = _zh_int(n)
        if fraction:
            text += "点" + "".join(_ZH_DIGITS[int(d)] for d in fraction)
        return text
    text = _en_int(n)
    if fraction:
        text += " point " + " ".join(_EN_DIGITS[int(d)] for d in fraction)
    return text


def _zh_int(n: int) -> str:
    if n == 0:
        return "零"
    groups: list[int] = []
    while n:
        groups.append(n % 10_000)
        n //= 10_000
    units = ("", "万", "亿")
    out = ""
    zero_pending = False
    for i in range(len(groups) - 1, -1, -1):
        g = groups[i]
        if g == 0:
            zero_pending = bool(out)
            continue
        if out and (zero_pending or g < 1000):
            out += "零"
        out += _zh_group(g) + units[i]
        zero_pending = False
    # 一十二 is said 十二 when it leads the number.
    return out[1:] if out.startswith("一十") else out


def _zh_group(g: int) -> str:
    """0 < g < 10000 with inner zeros read once (一千零一十)."""
    out = ""
    zero = False
    for value, unit in ((1000, "千"), (100, "百"), (10, "十"), (1, "")):
        d = g // value % 10
        if d == 0:
            zero = bool(out)
            continue
        if zero:
            out += "零"
            zero = False
        out += _ZH_DIGITS[d] + unit
    return out


def _en_int(n: int) -> str:
    if n < 10:
        return _EN_DIGITS[n]
    if n < 20:
        return _EN_TEENS[n - 10]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _EN_TENS[tens] + (f"-{_EN_DIGITS[ones]}" if ones else "")
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return f"{_EN_DIGITS[hundreds]} hundred" + (f" and {_en_int(rest)}" if rest else "")
    for size, name in ((10**9, "billion"), (10**6, "million"), (1000, "thousand")):
        if n >= size:
            high, rest = divmod(n, size)
            tail = "" if not rest else (" and " if rest < 100 else " ") + _en_int(rest)
            return f"{_en_int(high)} {name}{tail}"
    raise AssertionError("unreachable")  # pragma: no cover
