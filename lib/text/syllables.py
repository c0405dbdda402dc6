"""Pinyin syllables: the table of valid ones, parsing a reading unit, and the readings
of the Han characters the normalisation rules write.

A reading unit (see :mod:`lib.text.tokens`) is one of: a pinyin syllable with a tone
number 1-5 (``lu4``, ``lv3``), an upper-case Latin letter (``A``), or a lower-case
English word (``gate``). Tone marks (``lù``) and ``ü``/``u:`` are accepted on input and
written as numbers and ``v``.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "RULE_READINGS",
    "SYLLABLES",
    "is_han",
    "normalise_unit",
    "read_rule_han",
    "split_syllable",
    "unit_kind",
]

_DATA = Path(__file__).with_name("data") / "syllables.txt"

_MARKS = dict(zip("āáǎàēéěèīíǐìōóǒòūúǔùǖǘǚǜ", [(v, t) for v in "aeiouü" for t in (1, 2, 3, 4)], strict=True))
_SYLLABLE_RE = re.compile(r"^([a-z]+)([1-5])$")
_WORD_RE = re.compile(r"^[a-z][a-z']*$")


@functools.cache
def _load() -> frozenset[str]:
    lines = _DATA.read_text(encoding="utf-8").splitlines()
    return frozenset(line.strip() for line in lines if line.strip() and not line.startswith("#"))


class _Syllables:
    """The valid toneless syllables, loaded on first use."""

    def __contains__(self, item: object) -> bool:
        return item in _load()

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(_load()))

    def __len__(self) -> int:
        return len(_load())


#: Valid toneless pinyin syllables (``v`` for ü), from ``data/syllables.txt``.
SYLLABLES = _Syllables()


def is_han(ch: str) -> bool:
    """A CJK unified ideograph (the basic block and extension A)."""
    return "\u4e00" <= ch <= "\u9fff" or "\u3400" <= ch <= "\u4dbf"


def normalise_unit(unit: str) -> str:
    """One reading unit in canonical form: tone marks to numbers, ü to v, letters as
    typed (``A`` stays a letter, ``Gate`` becomes the word ``gate`` only if it has a
    lower-case letter)."""
    unit = unicodedata.normalize("NFC", unit.strip())
    if len(unit) == 1 and "A" <= unit <= "Z":
        return unit
    unit = unit.lower().replace("u:", "v").replace("ü", "v")
    tone = 0
    out = []
    for ch in unit:
        if ch in _MARKS:
            base, tone = _MARKS[ch]
            out.append("v" if base == "ü" else base)
        else:
            out.append(ch)
    text = "".join(out)
    if tone and not text[-1:].isdigit():
        text += str(tone)
    return text


def split_syllable(unit: str) -> tuple[str, int] | None:
    """``('lu', 4)`` for ``lu4``; ``None`` if ``unit`` has no tone number 1-5 or is
    not in the table."""
    m = _SYLLABLE_RE.match(unit)
    if m is None or m.group(1) not in SYLLABLES:
        return None
    return m.group(1), int(m.group(2))


def unit_kind(unit: str) -> str:
    """``syllable``, ``letter``, ``word``, or ``bad`` for a canonical unit."""
    if len(unit) == 1 and "A" <= unit <= "Z":
        return "letter"
    if split_syllable(unit) is not None:
        return "syllable"
    if _WORD_RE.match(unit) and not unit[-1].isdigit():
        return "word"
    return "bad"


#: The reading of every Han character the normalisation rules write (numbers, units,
#: dates, times): fixed, so a rule's output never depends on the reading model.
RULE_READINGS: dict[str, str] = {
    "零": "ling2", "一": "yi1", "二": "er4", "三": "san1", "四": "si4", "五": "wu3", "六": "liu4",
    "七": "qi1", "八": "ba1", "九": "jiu3", "十": "shi2", "百": "bai3", "千": "qian1", "万": "wan4",
    "亿": "yi4", "两": "liang3", "幺": "yao1", "点": "dian3", "负": "fu4", "分": "fen1", "之": "zhi1",
    "年": "nian2", "月": "yue4", "日": "ri4", "号": "hao4", "秒": "miao3", "元": "yuan2", "美": "mei3",
    "欧": "ou1", "英": "ying1", "镑": "bang4", "摄": "she4", "氏": "shi4", "度": "du4", "华": "hua2",
    "下": "xia4", "公": "gong1", "斤": "jin1", "里": "li3", "米": "mi3", "克": "ke4", "厘": "li2",
    "毫": "hao2", "升": "sheng1", "小": "xiao3", "时": "shi2", "钟": "zhong1", "每": "mei3", "至": "zhi4",
    "吨": "dun1", "平": "ping2", "方": "fang1", "立": "li4", "瓦": "wa3", "伏": "fu2", "特": "te4",
    "兆": "zhao4", "字": "zi4", "节": "jie2", "比": "bi3", "第": "di4", "到": "dao4",
}  # fmt: skip


def read_rule_han(text: str) -> str:
    """The reading of a rule's Han output, one syllable per character; a character
    outside :data:`RULE_READINGS` is a bug in the rule that wrote it."""
    return " ".join(RULE_READINGS[ch] for ch in text if ch.strip())
