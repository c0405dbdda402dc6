"""INTERIM text -> Reading for the Kokoro base, until the readings front end lands.

*** To be replaced by ``lib.text.read`` (issue 27) at integration. ***

The engine interface still passes text; the Kokoro base speaks a :class:`Reading`. Until
the front end (normalisation, pinyin in context, lexicon) is in ``lib.text``, this module
makes a plain one so the base can be built and measured: jieba words, pypinyin's
phrase readings (citation tones, neutral tone 5), digits read plainly (a Chinese number
by value next to Han text, English number words otherwise, digit by digit beyond 6
digits), short all-capital words as letters, other Latin words as English, pause marks.
It knows no codes, dates, times, units or lexicon. It is used only where
:class:`lib.engines.builtin.BuiltinEngine` has a text and no reading.

jieba's dictionary cache goes in the app's cache directory (:func:`configure_jieba`),
not the system temp directory.
"""

from __future__ import annotations

import functools
import logging
import os
import re
import threading
from pathlib import Path
from typing import Any

from lib.text.tokens import Reading, Token

__all__ = ["VERSION", "configure_jieba", "interim_read"]

_LOGGER = logging.getLogger(__name__)

#: Part of the engine's model version while this reader is in use.
VERSION = "interim-1"

_PIECES = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]+|[A-Za-z]+(?:'[A-Za-z]+)?|[0-9]+|[,，、;；:：]|[.。!！?？…]+")
_PAUSE = {",": ",", "，": ",", "、": ",", ";": ",", "；": ",", ":": ",", "：": ","}
_ONES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
         "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen")  # fmt: skip
_TENS = ("", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety")
_DIGITS_ZH = "零一二三四五六七八九"
_lock = threading.Lock()
_jieba_dir: Path | None = None


def configure_jieba(cache_dir: str | os.PathLike[str] | None) -> None:
    """Put jieba's dictionary cache in ``<cache_dir>/jieba`` (0700, made at the first
    reading); call before the first reading. ``None`` leaves jieba's default (the system temp directory)."""
    global _jieba_dir
    if cache_dir is None:
        return
    with _lock:
        _jieba_dir = Path(cache_dir) / "jieba"


@functools.lru_cache(maxsize=1)
def _jieba() -> Any:
    import jieba

    jieba.setLogLevel(logging.WARNING)
    with _lock:
        if _jieba_dir is not None:
            # Made here, at the first reading, not when the engine is built.
            _jieba_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            jieba.dt.tmp_dir = str(_jieba_dir)
    jieba.initialize()
    return jieba


def _english_number(n: int) -> list[str]:
    if n < 20:
        return [_ONES[n]]
    if n < 100:
        return [_TENS[n // 10]] + ([_ONES[n % 10]] if n % 10 else [])
    if n < 1000:
        rest = _english_number(n % 100) if n % 100 else []
        return [_ONES[n // 100], "hundred", *rest]
    rest = _english_number(n % 1000) if n % 1000 else []
    return [*_english_number(n // 1000), "thousand", *rest]


def _chinese_number(digits: str) -> str:
    if len(digits) > 6 or (len(digits) > 1 and digits.startswith("0")):
        return "".join(_DIGITS_ZH[int(d)] for d in digits)
    import cn2an

    return str(cn2an.an2cn(int(digits), "low"))


def _zh_tokens(text: str, source: str) -> list[Token]:
    from pypinyin import Style, lazy_pinyin

    out = []
    for word in _jieba().lcut(text):
        syllables = lazy_pinyin(word, style=Style.TONE3, neutral_tone_with_five=True)
        out.append(Token(word, " ".join(syllables), "zh", source, spoken=word))
    return out


@functools.lru_cache(maxsize=1024)
def interim_read(text: str) -> Reading:
    """A plain reading of ``text`` (see the module docstring)."""
    pieces = _PIECES.findall(text)
    has_han = any("\u3400" <= p[0] <= "\ufaff" for p in pieces)
    tokens: list[Token] = []
    for i, piece in enumerate(pieces):
        first = piece[0]
        if "\u3400" <= first <= "\ufaff":
            tokens.extend(_zh_tokens(piece, "model"))
        elif first.isdigit():
            near_han = any("\u3400" <= p[0] <= "\ufaff" for p in pieces[max(i - 1, 0) : i + 2])
            if near_han or (has_han and not any(p[0].isalpha() and p.isascii() for p in pieces)):
                tokens.extend(_zh_tokens(_chinese_number(piece), "rule"))
            elif len(piece) > 6:
                tokens.append(Token(piece, " ".join(_ONES[int(d)] for d in piece), "en", "rule"))
            else:
                tokens.append(Token(piece, " ".join(_english_number(int(piece))), "en", "rule"))
        elif first.isascii() and first.isalpha():
            # "I" and "A" before an English word are the pronoun and the article.
            word_next = i + 1 < len(pieces) and pieces[i + 1].isascii() and pieces[i + 1][0].isalpha()
            if piece.isupper() and len(piece) <= 4 and not (piece in ("I", "A") and word_next):
                tokens.append(Token(piece, " ".join(piece), "letters", "text"))
            else:
                tokens.append(Token(piece, piece.lower(), "en", "text"))
        else:
            mark = _PAUSE.get(first) or {"。": ".", "！": "!", "？": "?", "…": "."}.get(first, first)
            mark = mark if mark in ",.?!" else "."
            if tokens and tokens[-1].kind != "pause":
                tokens.append(Token(piece, mark, "pause", "text"))
    return Reading(tuple(tokens), language="zh" if has_han else "en", version=VERSION)
