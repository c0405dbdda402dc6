"""Chinese text normalisation by context: digits, symbols and Latin letters to tokens.

:func:`normalise_zh` cuts a text into pieces: plain text for the reading model and
:class:`Token` for what a rule reads (numbers, codes, dates, times, units, letters).
The conventions (issue 27, ``readings-dev.tsv``):

- codes (a letter with digits, room numbers, verification codes, digit strings with a
  leading zero or of 7+ digits) digit by digit, 1 as 幺 (yao1);
- phone and service numbers (after 电话/拨打/热线..., 110, 12345, 95588, mobile
  numbers, 400-820-8820) digit by digit, 1 as 幺;
- years digit by digit with 1 as 一; dates as 年月日; times as X点Y, minutes 10-19 as
  一十X (二十三点一十), whole hours as X点, 2 o'clock as 两点;
- quantities, prices, decimals, percentages, fractions, temperatures and units as
  values; 两 for a bare 2 before a measure word and for a leading 2 before 百/千/万/亿;
- ranges (3-5个, 5~10%, 9:00-17:00, 100-200元) with 到 between the two values; a
  year and month (2025-12, 2025/12) as 年月;
- values of any length: a whole part past 16 digits (beyond 万亿) digit by digit
  (:data:`lib.text.numbers.ZH_MAX_DIGITS`).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Iterator

from lib.text.numbers import zh_cardinal, zh_digits, zh_int, zh_number
from lib.text.syllables import read_rule_han
from lib.text.tokens import Token

__all__ = ["Piece", "letters_token", "normalise_zh", "word_token"]

_LOGGER = logging.getLogger(__name__)

#: A rule's token, or a span ``(start, end)`` of the text left for the reading model.
Piece = Token | tuple[int, int]

_PATTERN = re.compile(
    r"(?P<date>(?<!\d)(?P<dy>\d{4})[-/.](?P<dm>\d{1,2})[-/.](?P<dd>\d{1,2})(?![\d.]))"
    r"|(?P<phone>(?<![\d-])\d{3,4}(?:-\d{3,8}){1,2}(?![\d-]))"
    r"|(?P<ym>(?<![\d\-/.])(?P<ymy>(?:19|20)\d{2})[-/](?P<ymm>0?[1-9]|1[0-2])(?![\d\-/]|\.\d))"
    r"|(?P<time>(?<![\d:.])(?P<hh>[01]?\d|2[0-3]):(?P<mm>[0-5]\d)(?::(?P<ss>[0-5]\d))?(?![\d:]))"
    r"|(?P<temp>(?P<tsign>(?<![0-9A-Za-z.])-)?(?P<tnum>\d+(?:\.\d+)?) ?° ?(?P<tunit>[CF])?)"
    r"|(?P<pct>(?P<psign>(?<![0-9A-Za-z.])-)?(?P<pnum>\d+(?:\.\d+)?) ?(?P<pmark>[%‰]))"
    r"|(?P<money>(?P<cur>[¥$€£]) ?(?P<mnum>\d[\d,]*(?:\.\d+)?))"
    r"|(?P<frac>(?P<fsign>(?<![0-9A-Za-z.])-)?(?<![\d/⁄])(?P<fa>\d+)[/⁄](?P<fb>\d+)(?![\d/⁄]))"
    r"|(?P<code>(?<![A-Za-z])(?P<cl>[A-Z]{1,3})-?(?P<cd>\d+)(?![\d.]))"
    r"|(?P<unit>(?P<unum>\d+(?:\.\d+)?) ?(?P<uname>km/h|kg|km|cm|mm|ml|mL|m|g|L|t|h|min|s)(?![A-Za-z]))"
    r"|(?P<num>(?P<nsign>(?<![0-9A-Za-z.])-)?(?P<nnum>\d+(?:,\d{3}(?!\d))*(?:\.\d+)?|(?<![^\s(-])\.\d+))"
    r"|(?P<latin>[A-Za-z]+(?:'[A-Za-z]+)?)"
)

_UNITS = {
    "km/h": "公里每小时", "kg": "公斤", "km": "公里", "cm": "厘米", "mm": "毫米", "ml": "毫升", "mL": "毫升",
    "m": "米", "g": "克", "L": "升", "t": "吨", "h": "小时", "min": "分钟", "s": "秒",
}  # fmt: skip
_CURRENCY = {"¥": "元", "$": "美元", "€": "欧元", "£": "英镑"}

#: Words right before a number that make it a code read digit by digit.
_CODE_BEFORE = re.compile(
    r"(?:验证码|校验码|动态码|密码|取件码|取货码|提货码|取餐码|取票码|工号|编号|单号|订单号|运单号|尾号|车次|航班|"
    r"航班号|房号|房间号|座位号|座号|卡号|账号|门牌号|批次|型号|代码|邮编|证号)"
    r"(?:是|为|:|：)? ?$"
)
#: Words right before a number that make it a phone number (1 as 幺).
_PHONE_BEFORE = re.compile(
    r"(?:电话|热线|拨打|致电|拨|打|手机|手机号|号码|呼叫|客服|报警|急救|火警|联系|传真)(?:是|为|:|：)? ?$"
)
#: Service and emergency numbers read as phone numbers on their own.
_SERVICE = frozenset(
    re.findall(
        r"\d+",
        "110 119 120 122 114 999 12306 12315 12320 12345 12348 12358 12365 12366 12369 12328 12333 12395 "
        "10086 10010 10000 95588 95533 95566 95599 95555 95559 95528 95508 95518 95522 95519 95598",
    )
)
_MOBILE = re.compile(r"^1[3-9]\d{9}$")
#: After a number: a place read as a code (room 1208).
_CODE_AFTER = re.compile(r"^(?:房间|号房|室|房|包厢|床)")
#: Measure words (and units) before which a bare 2 is 两.
_MEASURE = re.compile(
    r"^(?:个|件|张|位|名|台|辆|本|只|条|次|天|周|年|岁|人|元|块|斤|公斤|千克|克|吨|米|公里|千米|小时|分钟|秒|瓶|杯|份|套|"
    r"间|家|双|对|种|项|颗|粒|片|盒|箱|包|袋|把|节|趟|架|艘|列|排|层楼|点钟|点|倍|遍|场|批|组|部|支|根|块钱|毛|角)"
)
#: A number that a unit or measure follows is a quantity, never a service number.
_QUANTITY_AFTER = re.compile(r"^(?:[.,]\d|[个件张位名台辆本只条次天周年月日号岁人元块斤克吨米里秒点倍%])")


#: Matches that read a value, which a range joins (3-5个, 9:00-17:00, 5~10%).
_VALUES = frozenset({"time", "temp", "pct", "money", "unit", "num"})
#: What stands between the two values of a range: the dash, after the first value's
#: measure word or unit if it has one (5元-10元).
_RANGE_GAP = re.compile(r"(?P<unit>[\u4e00-\u9fff]{1,3})?(?P<dash> ?[-~〜–] ?)")
#: A range's second value right after the first one (its context is what follows it).
_RANGE_TAIL = re.compile(r" ?[-~〜–] ?\d+(?:,\d{3})*(?:\.\d+)?")
#: A range's first value right before the second one (its context is what precedes it).
RANGE_HEAD = re.compile(r"\d+(?:,\d{3})*(?:\.\d+)? ?[-~〜–] ?$")


def normalise_zh(text: str, start: int = 0, end: int | None = None) -> list[Piece]:
    """``text[start:end]`` as pieces: rule tokens and spans of plain text, in order.
    Rules see the whole ``text`` as context."""
    end = len(text) if end is None else end
    out: list[Piece] = []
    pos = start
    previous: re.Match[str] | None = None
    for m in range_matches(_PATTERN, text, start, end, _VALUES, _is_measure):
        dash = range_dash(text, previous, m, _VALUES, _is_measure) if previous is not None else None
        if dash is not None:
            if dash[0] > pos:
                out.append((pos, dash[0]))  # the first value's measure word, for the reader
            out.append(_rule(text[dash[0] : dash[1]], "到"))
        elif m.start() > pos:
            out.append((pos, m.start()))
        out.extend(_read_match(text, m))
        pos = m.end()
        previous = m
    if pos < end:
        out.append((pos, end))
    return out


def range_matches(
    pattern: re.Pattern[str],
    text: str,
    start: int,
    end: int,
    values: frozenset[str],
    is_unit: Callable[[str], bool] | None = None,
) -> Iterator[re.Match[str]]:
    """``pattern``'s matches in ``text[start:end]``, as :meth:`re.Pattern.finditer`, except
    that a value right after a value (5%-10%), or after a value and its measure word
    (``is_unit``: 5元-10元), does not take the dash between them as its sign: the match
    starts after the dash, which :func:`range_dash` then reads as the range's."""
    pos = start
    previous: re.Match[str] | None = None
    while pos < end:
        m = pattern.search(text, pos, end)
        if m is None:
            return
        if (
            previous is not None
            and previous.lastgroup in values
            and m.lastgroup in values
            and m.group(0).startswith("-")
        ):
            between = text[previous.end() : m.start()]
            if not between or (is_unit is not None and is_unit(between)):
                unsigned = pattern.match(text, m.start() + 1, end)
                if unsigned is not None and unsigned.lastgroup in values:
                    m = unsigned
        yield m
        pos = m.end()
        previous = m


def range_dash(
    text: str,
    left: re.Match[str],
    right: re.Match[str],
    values: frozenset[str],
    is_unit: Callable[[str], bool] | None = None,
) -> tuple[int, int] | None:
    """Where the dash is if ``left`` and ``right``, two matches that read values, are the
    ends of a range, else None: one dash or tilde between them (after ``left``'s measure
    word where ``is_unit`` says it is one: 5元-10元), and no third value chained on either
    side (1-2-3 is not a range)."""
    if left.lastgroup not in values or right.lastgroup not in values:
        return None
    gap = _RANGE_GAP.fullmatch(text, left.end(), right.start())
    if gap is None:
        return None
    unit = gap.group("unit")
    if unit is not None and (is_unit is None or not is_unit(unit)):
        return None
    chained = _RANGE_GAP.match(text, right.end())
    if chained is not None and chained.group("unit") is None and text[chained.end() : chained.end() + 1].isdecimal():
        return None
    if re.search(r"\d ?[-~〜–] ?$", text[max(0, left.start() - 3) : left.start()]):
        return None
    return gap.span("dash")


def _is_measure(word: str) -> bool:
    """A measure word or unit, and nothing else (元, 个, 公斤)."""
    m = _MEASURE.match(word)
    return m is not None and m.end() == len(word)


def _rule(text: str, spoken: str, *, pinned: bool = False) -> Token:
    return Token(text, read_rule_han(spoken), "zh", "rule", spoken, pinned or "幺" in spoken)


def letters_token(text: str) -> Token:
    """Latin letters read one by one (``ID`` -> ``I D``)."""
    letters = " ".join(ch.upper() for ch in text if ch.isalpha())
    return Token(text, letters, "letters", "rule", letters)


def word_token(text: str) -> Token:
    """An English word inside other text, read as the word (lower case)."""
    word = text.lower()
    return Token(text, word, "en", "text", word)


def _read_match(text: str, m: re.Match[str]) -> list[Token]:
    kind = m.lastgroup
    whole = m.group(0)
    if m.group("date") is not None:
        month, day = int(m.group("dm")), int(m.group("dd"))
        if 1 <= month <= 12 and 1 <= day <= 31:
            spoken = zh_digits(m.group("dy")) + "年" + zh_int(month) + "月" + zh_int(day) + "日"
            return [_rule(whole, spoken)]
        return [_rule(whole, zh_digits(whole, yao=True))]
    if m.group("phone") is not None:
        return [_rule(whole, _phone_or_range(text, m))]
    if m.group("ym") is not None:
        return [_rule(whole, zh_digits(m.group("ymy")) + "年" + zh_int(int(m.group("ymm"))) + "月")]
    if m.group("time") is not None:
        return [_rule(whole, _time(int(m.group("hh")), int(m.group("mm")), m.group("ss")))]
    if m.group("temp") is not None:
        unit = {"C": "摄氏度", "F": "华氏度"}.get(m.group("tunit") or "", "度")
        return [_rule(whole, ("零下" if m.group("tsign") else "") + zh_number(m.group("tnum")) + unit)]
    if m.group("pct") is not None:
        head = "百分之" if m.group("pmark") == "%" else "千分之"
        return [_rule(whole, ("负" if m.group("psign") else "") + head + zh_number(m.group("pnum")))]
    if m.group("money") is not None:
        value = _money_value(m.group("mnum").replace(",", ""))
        return [_rule(whole, zh_number(value, liang=True) + _CURRENCY[m.group("cur")])]
    if m.group("frac") is not None:
        a, b = zh_cardinal(m.group("fa")), zh_cardinal(m.group("fb"))
        sign = "负" if m.group("fsign") else ""
        if b == "零":
            return [_rule(whole, sign + a + "比" + b)]
        return [_rule(whole, sign + b + "分之" + a)]
    if m.group("code") is not None:
        return [letters_token(m.group("cl")), _rule(m.group("cd"), zh_digits(m.group("cd"), yao=True))]
    if m.group("unit") is not None:
        return [_rule(whole, zh_number(m.group("unum"), liang=True) + _UNITS[m.group("uname")])]
    if m.group("num") is not None:
        return [_number(text, m)]
    if kind == "latin":
        return [letters_token(whole) if whole.isupper() and len(whole) <= 6 else word_token(whole)]
    raise AssertionError(f"unhandled match {kind}")  # pragma: no cover - the pattern has no other group


def _time(hour: int, minute: int, second: str | None) -> str:
    out = zh_int(hour, liang=True) + "点"
    if minute:
        out += ("零" + zh_int(minute)) if minute < 10 else (("一" if minute < 20 else "") + zh_int(minute))
    if second is not None and int(second):
        out += ("分" if minute else "零分") + zh_int(int(second)) + "秒"
    return out


def _phone_or_range(text: str, m: re.Match[str]) -> str:
    """A dashed number digit by digit (400-820-8820), unless it is two values and a
    measure word, a unit or 年 follows: a range (100-200元, 2025-2026年)."""
    whole = m.group(0)
    after = text[m.end() : m.end() + 6]
    low, _, high = whole.partition("-")
    if "-" in high or low.startswith("0") or not (_MEASURE.match(after) or after.startswith(("%", "万", "亿"))):
        return zh_digits(whole, yao=True)
    if after.startswith("年"):
        return zh_digits(low) + "到" + zh_digits(high)
    return zh_cardinal(low, liang=True) + "到" + zh_cardinal(high, liang=True)


def _money_value(value: str) -> str:
    """Trailing zeros of a price are not said: 128.50 元 is 一百二十八点五元."""
    if "." in value:
        value = value.rstrip("0").rstrip(".")
    return value or "0"


def _number(text: str, m: re.Match[str]) -> Token:
    """A bare number, read by what stands around it."""
    whole = m.group(0)
    raw = m.group("nnum").replace(",", "")
    sign = bool(m.group("nsign"))
    # The values of a range (2-3个) are read in the context of the whole range.
    head = RANGE_HEAD.search(text, max(0, m.start() - 24), m.start())
    first = head.start() if head else m.start()
    before = text[max(0, first - 8) : first]
    tail = _RANGE_TAIL.match(text, m.end())
    after = text[(tail.end() if tail else m.end()) :][:6]
    if "." in raw:
        if after.startswith(("元", "块")):
            raw = _money_value(raw)
        return _rule(whole, zh_number(("-" if sign else "") + raw))
    if sign:
        return _rule(whole, zh_number("-" + raw))
    if after.startswith("年") and len(raw) in (2, 4):
        return _rule(whole, zh_digits(raw))
    if len(raw) > 1 and raw.startswith("0"):
        return _rule(whole, zh_digits(raw, yao=True))
    if _CODE_BEFORE.search(before) or (len(raw) >= 3 and _CODE_AFTER.match(after)):
        return _rule(whole, zh_digits(raw, yao=True))
    if not _QUANTITY_AFTER.match(after) and (
        (len(raw) >= 3 and _PHONE_BEFORE.search(before)) or raw in _SERVICE or _MOBILE.match(raw) or len(raw) >= 7
    ):
        return _rule(whole, zh_digits(raw, yao=True))
    if len(raw) >= 13:
        return _rule(whole, zh_digits(raw, yao=True))
    ordinal = before.endswith("第")
    liang = not ordinal and (len(raw) > 1 or bool(_MEASURE.match(after)))
    return _rule(whole, zh_int(int(raw), liang=liang))
