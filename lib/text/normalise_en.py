"""English text normalisation: numbers, ordinals, money, times, years, abbreviations,
codes and letters to tokens.

:func:`normalise_en` cuts a text into pieces like :func:`lib.text.normalise_zh.normalise_zh`:
every Latin word and number becomes a token (kind ``en`` or ``letters``); Han runs,
punctuation and anything else stay plain text for the common reader. Conventions:
codes (``CA1831``, ``B12``) as letters then digits one by one; phone and emergency
numbers (after call/dial/phone, 110/911/999..., 5+ digits, 555-1234, 800-555-1234) digit
by digit with zero; numbers with a leading zero (007) and room, flight, train and seat
numbers of 3+ digits digit by digit; years (1100-2099 after in/since/... or at a
sentence end) as pairs; fractions of a one-digit numerator and a denominator 2-10 as
fractions (3/4: three quarters); ranges (3-5, 10-20%) with "to"; everything else as a
value, a whole part past 15 digits (beyond the trillions) digit by digit
(:data:`lib.text.numbers.EN_MAX_DIGITS`).
"""

from __future__ import annotations

import logging
import re

from lib.text.normalise_zh import RANGE_HEAD, Piece, letters_token, range_dash, range_matches
from lib.text.numbers import en_cardinal, en_digits, en_int, en_number, en_ordinal, en_ordinal_digits, en_year
from lib.text.tokens import Token

__all__ = ["normalise_en"]

_LOGGER = logging.getLogger(__name__)

_PATTERN = re.compile(
    r"(?P<time>(?<![\d:.])(?P<hh>[01]?\d|2[0-3]):(?P<mm>[0-5]\d)(?![\d:])(?: ?(?P<ap>[AaPp])\.? ?[Mm]\.?(?![A-Za-z]))?)"
    r"|(?P<phone>(?<![\d-])(?:\d{3}-)?\d{3}-\d{4}(?![\d-]))"
    r"|(?P<money>(?P<cur>[$€£¥]) ?(?P<mint>\d(?:\d|,(?=\d))*)(?:\.(?P<mdec>\d+))?(?! ?\d))"
    r"|(?P<ord>(?P<onum>\d+)(?:st|nd|rd|th)(?![A-Za-z]))"
    r"|(?P<frac>(?P<fsign>(?<![0-9A-Za-z.])-)?(?<![\d/⁄])(?P<fa>[1-9])[/⁄](?P<fb>10|[2-9])(?![\d/⁄]))"
    r"|(?P<pct>(?P<pnum>-?\d+(?:\.\d+)?) ?%)"
    r"|(?P<temp>(?P<tnum>-?\d+(?:\.\d+)?) ?° ?(?P<tunit>[CF])?)"
    r"|(?P<unit>(?P<unum>-?\d+(?:\.\d+)?) ?(?P<uname>km/h|kg|km|cm|mm|ml|mL|m|g|L|h|min)(?![A-Za-z]))"
    r"|(?P<code>(?<![A-Za-z])(?P<cl>[A-Z]{1,3})-?(?P<cd>\d+)(?![\d.A-Za-z]))"
    r"|(?P<num>(?P<nnum>(?<![0-9A-Za-z.])-?\d(?:\d|,(?=\d))*(?:\.\d+)?|(?<![^\s(])-?\.\d+|\d+))"
    r"|(?P<abbr>(?<![A-Za-z])(?P<aw>Dr|Mr|Mrs|Ms|St|No|Nos|Jr|Sr|Ave|Rd|Blvd|Mt|Ft|Prof|Capt|Lt|Gen|vs|etc|approx|Tel)\.)"
    r"|(?P<word>[A-Za-z]+(?:'[A-Za-z]+)?)"
)

_ABBREVIATIONS = {
    "Dr": "doctor", "Mr": "mister", "Mrs": "missus", "Ms": "miz", "Jr": "junior", "Sr": "senior",
    "Ave": "avenue", "Rd": "road", "Blvd": "boulevard", "Mt": "mount", "Ft": "fort", "Prof": "professor",
    "Capt": "captain", "Lt": "lieutenant", "Gen": "general", "vs": "versus", "etc": "et cetera",
    "approx": "approximately", "Tel": "telephone", "Nos": "numbers",
}  # fmt: skip
_UNITS = {
    "km/h": ("kilometre per hour", "kilometres per hour"), "kg": ("kilogram", "kilograms"),
    "km": ("kilometre", "kilometres"), "cm": ("centimetre", "centimetres"), "mm": ("millimetre", "millimetres"),
    "ml": ("millilitre", "millilitres"), "mL": ("millilitre", "millilitres"), "m": ("metre", "metres"),
    "g": ("gram", "grams"), "L": ("litre", "litres"), "h": ("hour", "hours"), "min": ("minute", "minutes"),
}  # fmt: skip
_CURRENCY = {"$": ("dollar", "dollars", "cent", "cents"), "€": ("euro", "euros", "cent", "cents"),
             "£": ("pound", "pounds", "penny", "pence"), "¥": ("yuan", "yuan", "fen", "fen")}  # fmt: skip
_YEAR_BEFORE = re.compile(r"(?:\b(?:in|since|year|until|till|by|from|of|after|before|circa|around|to)|[,(]) ?$", re.I)
_PHONE_BEFORE = re.compile(r"\b(?:call|dial|phone|telephone|tel|fax|hotline|number|ring|text)[:.]? ?$", re.I)
_DIGITS_BEFORE = re.compile(r"\b(?:room|flight|train|seat|bus|code|pin|ext|extension|line)[:.]? ?(?:no\.? ?)?$", re.I)
_EMERGENCY = frozenset({"110", "119", "120", "911", "999", "112", "000", "122"})
#: All-capital words said as words, not letters.
_ACRONYM_WORDS = frozenset(
    {"OK", "NASA", "UNESCO", "NATO", "COVID", "LASER", "RADAR", "SCUBA", "WIFI", "AIDS", "I", "A"}
)


#: Matches that read a value, which a range joins (3-5 days, 10-20%).
_VALUES = frozenset({"time", "money", "pct", "temp", "unit", "num"})
_FRACTIONS = {2: ("half", "halves"), 4: ("quarter", "quarters")}


def normalise_en(text: str, start: int = 0, end: int | None = None) -> list[Piece]:
    """``text[start:end]`` as pieces: tokens for every English word and number, spans
    of plain text between."""
    end = len(text) if end is None else end
    out: list[Piece] = []
    pos = start
    previous: re.Match[str] | None = None
    for m in range_matches(_PATTERN, text, start, end, _VALUES):
        if m.start() > pos:
            if previous is not None and _is_range(text, previous, m):
                out.append(_words(text[pos : m.start()], "to"))
            else:
                out.append((pos, m.start()))
        out.extend(_read(text, m))
        pos = m.end()
        previous = m
    if pos < end:
        out.append((pos, end))
    return out


def _is_range(text: str, left: re.Match[str], right: re.Match[str]) -> bool:
    """A range, but not a phone number: 555-1234 or 03-5555 are not ranges, nor is
    anything after call/dial/phone."""
    if range_dash(text, left, right, _VALUES) is None:
        return False
    a = left.group(0).lstrip("-").split(".")[0]
    b = right.group(0).split(".")[0]
    if (
        a.isdecimal()
        and b.isdecimal()
        and (a.startswith("0") or len(a) > 4 or len(b) > 4 or (len(a), len(b)) == (3, 4))
    ):
        return False
    return not _PHONE_BEFORE.search(text[max(0, left.start() - 16) : left.start()])


def _words(text: str, words: str, source: str = "rule") -> Token:
    reading = " ".join(words.replace("-", " ").split())
    return Token(text, reading, "en", source, words)


def _read(text: str, m: re.Match[str]) -> list[Token]:
    whole = m.group(0)
    if m.group("time") is not None:
        hour, minute = int(m.group("hh")), int(m.group("mm"))
        ap = m.group("ap")
        if minute == 0:
            said = en_int(hour) + ("" if ap else " o'clock")
        elif minute < 10:
            said = f"{en_int(hour)} oh {en_int(minute)}"
        else:
            said = f"{en_int(hour)} {en_int(minute)}"
        tokens = [_words(whole, said)]
        if ap:
            tokens.append(letters_token(ap.upper() + "M"))
        return tokens
    if m.group("money") is not None:
        one, many, sub, subs = _CURRENCY[m.group("cur")]
        whole_part = m.group("mint").replace(",", "").lstrip("0") or "0"
        decimals = m.group("mdec") or ""
        if len(decimals) > 2:  # $1.999: not cents
            return [_words(whole, f"{en_number(whole_part + '.' + decimals)} {many}")]
        cents = int(decimals.ljust(2, "0"))
        said = f"{en_cardinal(whole_part)} {one if whole_part == '1' else many}"
        if cents:
            said += f" and {en_int(cents)} {sub if cents == 1 else subs}"
        return [_words(whole, said)]
    if m.group("ord") is not None:
        return [_words(whole, en_ordinal_digits(m.group("onum")))]
    if m.group("frac") is not None:
        a, b = int(m.group("fa")), int(m.group("fb"))
        one, many = _FRACTIONS.get(b) or (en_ordinal(b), en_ordinal(b) + "s")
        said = ("minus " if m.group("fsign") else "") + f"{en_int(a)} {one if a == 1 else many}"
        return [_words(whole, said)]
    if m.group("pct") is not None:
        return [_words(whole, en_number(m.group("pnum")) + " percent")]
    if m.group("temp") is not None:
        unit = {"C": " degrees celsius", "F": " degrees fahrenheit"}.get(m.group("tunit") or "", " degrees")
        return [_words(whole, en_number(m.group("tnum")) + unit)]
    if m.group("unit") is not None:
        one, many = _UNITS[m.group("uname")]
        value = m.group("unum")
        return [_words(whole, f"{en_number(value)} {one if value == '1' else many}")]
    if m.group("code") is not None:
        return [letters_token(m.group("cl")), _words(m.group("cd"), en_digits(m.group("cd")))]
    if m.group("phone") is not None:
        return [_words(whole, en_digits(whole))]
    if m.group("num") is not None:
        return [_number(text, m)]
    if m.group("abbr") is not None:
        return [_abbreviation(text, m)]
    word = m.group("word")
    if word.isupper() and len(word) > 1 and word not in _ACRONYM_WORDS:
        return [letters_token(word)]
    return [_words(word, word.lower(), "text")]


def _number(text: str, m: re.Match[str]) -> Token:
    whole = m.group(0)
    raw = whole.replace(",", "")
    # The second value of a range (Room 101-105) is read in the context of the first.
    head = RANGE_HEAD.search(text, max(0, m.start() - 24), m.start())
    first = head.start() if head else m.start()
    before = text[max(0, first - 16) : first]
    after = text[m.end() : m.end() + 2]
    if "." in raw or raw.startswith("-"):
        return _words(whole, en_number(raw))
    if len(raw) > 1 and raw.startswith("0") and "," not in whole:
        return _words(whole, en_digits(raw))  # 007, 0800: a code, not a value
    if (
        len(raw) == 4
        and "," not in whole
        and 1100 <= int(raw) <= 2099
        and (_YEAR_BEFORE.search(before) or not after.strip(" ")[:1].isalnum())
        and not _PHONE_BEFORE.search(before)
    ):
        return _words(whole, en_year(int(raw)))
    emergency = raw in _EMERGENCY and not after.startswith("%")
    if emergency or _PHONE_BEFORE.search(before) or (len(raw) >= 5 and "," not in whole):
        return _words(whole, en_digits(raw))
    if len(raw) >= 3 and _DIGITS_BEFORE.search(before):
        return _words(whole, en_digits(raw))
    return _words(whole, en_cardinal(raw))


def _abbreviation(text: str, m: re.Match[str]) -> Token:
    word = m.group("aw")
    after = text[m.end() : m.end() + 3].lstrip()
    if word == "No":
        return _words(m.group(0), "number" if after[:1].isdigit() else "no")
    if word == "St":
        before = text[: m.start()].rstrip()
        # "St. James" is a saint; "Main St." is a street.
        last = before.split()[-1] if before.split() else ""
        saint = after[:1].isupper() and not (last[:1].isupper() and last.isalpha())
        return _words(m.group(0), "saint" if saint else "street")
    return _words(m.group(0), _ABBREVIATIONS[word])
