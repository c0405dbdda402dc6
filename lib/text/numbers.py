"""Numbers as words, in Chinese (Han characters) and English.

Pure functions, no state: the normalisers (:mod:`lib.text.normalise_zh`,
:mod:`lib.text.normalise_en`) and the template readings (:mod:`lib.compose.readings`)
call them.
"""

from __future__ import annotations

__all__ = [
    "EN_DIGITS",
    "EN_MAX_DIGITS",
    "ZH_DIGITS",
    "ZH_MAX_DIGITS",
    "en_cardinal",
    "en_digits",
    "en_int",
    "en_number",
    "en_ordinal",
    "en_ordinal_digits",
    "en_year",
    "zh_cardinal",
    "zh_digits",
    "zh_int",
    "zh_number",
]

ZH_DIGITS = "零一二三四五六七八九"
EN_DIGITS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
_EN_TEENS = (
    "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen",
)  # fmt: skip
_EN_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_EN_ORDINAL = {
    "one": "first", "two": "second", "three": "third", "five": "fifth", "eight": "eighth", "nine": "ninth",
    "twelve": "twelfth",
}  # fmt: skip


#: Whole numbers of more digits than these are read digit by digit: Mandarin cardinals
#: go up to 九千九百九十九万九千九百九十九亿... (below 10^16, where 亿亿 would follow),
#: English ones up to nine hundred and ninety-nine trillion (below 10^15). Past them a
#: reading in words means nothing to a listener, and Python's ``int`` refuses strings
#: of more than 4,300 digits anyway.
ZH_MAX_DIGITS = 16
EN_MAX_DIGITS = 15


def _decimal_digits(digits: str) -> str:
    """The decimal digits of ``digits`` as ASCII (any script's: ``int`` reads them),
    everything else left out (signs, separators, superscripts)."""
    return "".join(str(int(d)) for d in digits if d.isdecimal())


def zh_digits(digits: str, *, yao: bool = False) -> str:
    """Digit by digit: ``120`` -> 一二零, or 幺二零 with ``yao`` (phone and code style)."""
    out = "".join(ZH_DIGITS[int(d)] for d in _decimal_digits(digits))
    return out.replace("一", "幺") if yao else out


def zh_int(n: int, *, liang: bool = False) -> str:
    """``n`` >= 0 as a Chinese cardinal: 1010 -> 一千零一十, 12 -> 十二, 10^12 + 2 x 10^8 ->
    一万零二亿 (the part above 亿 read as a number of 亿); from 10^16 on digit by digit.

    ``liang``: a leading 2 before 百/千/万/亿, and a bare 2, are said 两 (两千, 两个):
    what a speaker says before a measure word."""
    if n >= 10**ZH_MAX_DIGITS:
        return zh_digits(str(n))
    out = _zh_cardinal(n) if n else "零"
    # 一十二 is said 十二 when it leads the number.
    if out.startswith("一十"):
        out = out[1:]
    if liang and out.startswith("二") and (len(out) == 1 or out[1] in "百千万亿"):
        out = "两" + out[1:]
    return out


def _zh_cardinal(n: int) -> str:
    """0 < n < 10^16: the part above 亿 (below 10^8) and the rest, each in groups of 万,
    inner zeros read once."""
    high, low = divmod(n, 10**8)
    if high:
        out = _zh_wan(high) + "亿"
        if low:
            out += ("零" if low < 10**7 else "") + _zh_wan(low)
        return out
    return _zh_wan(low)


def _zh_wan(n: int) -> str:
    """0 < n < 10^8 in groups of 万 (一千零一十万零五)."""
    high, low = divmod(n, 10_000)
    if not high:
        return _zh_group(low)
    out = _zh_group(high) + "万"
    if low:
        out += ("零" if low < 1000 else "") + _zh_group(low)
    return out


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
        out += ZH_DIGITS[d] + unit
    return out


def zh_cardinal(digits: str, *, liang: bool = False) -> str:
    """A string of digits as a Chinese cardinal (:func:`zh_int`; leading zeros not said),
    digit by digit past :data:`ZH_MAX_DIGITS` digits; whatever its length, never raises."""
    values = _decimal_digits(digits).lstrip("0")
    if len(values) > ZH_MAX_DIGITS:
        return zh_digits(values)
    return zh_int(int(values or "0"), liang=liang)


def zh_number(value: str, *, liang: bool = False) -> str:
    """A decimal string (``-3``, ``99.9``, ``0.50``, ``.5``) as Chinese: 负三, 九十九点九,
    零点五零, 零点五; a whole part past :data:`ZH_MAX_DIGITS` digits digit by digit."""
    sign = ""
    if value.startswith("-"):
        sign, value = "负", value[1:]
    whole, _, fraction = value.partition(".")
    text = zh_cardinal(whole, liang=liang and not fraction)
    if fraction:
        text += "点" + zh_digits(fraction)
    return sign + text


def en_int(n: int) -> str:
    """``n`` >= 0 in English words, hyphenated tens: 45 -> forty-five; from 10^15 on
    digit by digit (one two three ...)."""
    if n < 10:
        return EN_DIGITS[n]
    if n < 20:
        return _EN_TEENS[n - 10]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _EN_TENS[tens] + (f"-{EN_DIGITS[ones]}" if ones else "")
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        return f"{EN_DIGITS[hundreds]} hundred" + (f" and {en_int(rest)}" if rest else "")
    if n >= 10**EN_MAX_DIGITS:
        return en_digits(str(n))
    for size, name in ((10**12, "trillion"), (10**9, "billion"), (10**6, "million"), (1000, "thousand")):
        if n >= size:
            high, rest = divmod(n, size)
            tail = "" if not rest else (" and " if rest < 100 else " ") + en_int(rest)
            return f"{en_int(high)} {name}{tail}"
    raise AssertionError("unreachable")  # pragma: no cover


def en_cardinal(digits: str) -> str:
    """A string of digits in English words (:func:`en_int`; leading zeros not said),
    digit by digit past :data:`EN_MAX_DIGITS` digits; whatever its length, never raises."""
    values = _decimal_digits(digits).lstrip("0")
    if len(values) > EN_MAX_DIGITS:
        return en_digits(values)
    return en_int(int(values or "0"))


def en_number(value: str) -> str:
    """A decimal string as English: ``3.5`` -> three point five, ``-2`` -> minus two,
    ``.5`` -> point five; a whole part past :data:`EN_MAX_DIGITS` digits digit by digit."""
    sign = ""
    if value.startswith("-"):
        sign, value = "minus ", value[1:]
    whole, _, fraction = value.partition(".")
    if fraction and not whole:
        return sign + "point " + en_digits(fraction)
    text = en_cardinal(whole)
    if fraction:
        text += " point " + en_digits(fraction)
    return sign + text


def en_digits(digits: str) -> str:
    """Digit by digit: ``110`` -> one one zero."""
    return " ".join(EN_DIGITS[int(d)] for d in _decimal_digits(digits))


def en_ordinal_digits(digits: str) -> str:
    """A string of digits as an English ordinal (:func:`en_ordinal`); past
    :data:`EN_MAX_DIGITS` digits, digit by digit with the last one ordinal (one two
    third); ``0`` is zeroth."""
    values = _decimal_digits(digits).lstrip("0")
    if not values:
        return "zeroth"
    if len(values) > EN_MAX_DIGITS:
        return en_digits(values[:-1]) + " " + en_ordinal(int(values[-1]))
    return en_ordinal(int(values))


def en_ordinal(n: int) -> str:
    """``n`` >= 0 as an English ordinal: 4 -> fourth, 21 -> twenty-first, 0 -> zeroth."""
    words = en_int(n)
    head, sep, last = max(words.rpartition(" "), words.rpartition("-"), key=lambda p: len(p[0]))
    if last in _EN_ORDINAL:
        last = _EN_ORDINAL[last]
    elif last.endswith("y"):
        last = last[:-1] + "ieth"
    else:
        last += "th"
    return head + sep + last


def en_year(n: int) -> str:
    """A year as said: 1998 -> nineteen ninety-eight, 2005 -> two thousand five, 2025 ->
    twenty twenty-five, 1900 -> nineteen hundred."""
    if 2000 <= n <= 2009:
        return en_int(n).replace(" and ", " ")
    high, low = divmod(n, 100)
    if n < 1000 or n >= 10_000:
        return en_int(n)
    if low == 0:
        return f"{en_int(high)} hundred"
    return f"{en_int(high)} {'oh ' + EN_DIGITS[low] if low < 10 else en_int(low)}"
