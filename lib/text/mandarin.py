"""Mandarin readings in context: jieba words, pypinyin's phrase dictionary, context rules.

Why this model (measured, see ``bench/bench_readings.py --models``): on the
hand-checked polyphone set ``tests/data/polyphones.tsv`` (346 polyphone characters)
jieba words read by pypinyin got 93.4 % right, pypinyin alone (its own segmentation)
92.2 %, g2pM 85.3 %; g2pW needs a model download (not allowed) and torch. Both jieba
and pypinyin are pure Python with their data inside the wheel (jieba 42 MB installed,
pypinyin 4 MB) and read 100 characters in well under a millisecond.

jieba keeps one tokenizer per reader, built lazily on the first read (about 0.5 s,
or 3.5 s the first time ever, when it writes its cache); its cache file goes in the
directory the caller gives (the app's cache directory), never in the temp directory
and never at import time.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from lib.text.polyphones import CITATION, context_readings
from lib.text.syllables import is_han, split_syllable
from lib.text.tokens import Token

__all__ = ["MandarinReader", "pause_mark"]

_LOGGER = logging.getLogger(__name__)

#: Frequency given to shipped lexicon terms in jieba's dictionary: high enough that a
#: place name wins over a word that straddles it (下一站长春 -> 站 长春, not 站长 春),
#: low enough that a longer real word still wins (延长春运 stays 延长 春运).
_TERM_FREQ = 20_000

_PAUSES = {
    **dict.fromkeys("，、；：,;:()（）[]【】《》〈〉「」—–", ","),
    **dict.fromkeys("。．.…", "."),
    **dict.fromkeys("？?", "?"),
    **dict.fromkeys("！!", "!"),
}


def pause_mark(ch: str) -> str | None:
    """The pause a punctuation character makes, or ``None``."""
    return _PAUSES.get(ch)


class MandarinReader:
    """Reads Han text in context; thread-safe, lazily initialised."""

    def __init__(self, cache_dir: str | Path | None = None, terms: Mapping[str, str] | None = None) -> None:
        """``cache_dir``: where jieba keeps its dictionary cache (``None``: build it in
        memory on every start, 0.5 s more). ``terms``: shipped lexicon term -> reading,
        added to the word list so segmentation keeps them whole."""
        self._cache_dir = Path(cache_dir) if cache_dir is not None else None
        self._terms = dict(terms or {})
        self._lock = threading.Lock()
        self._tokenizer: Any = None
        self._pinyin: Any = None
        self._heteronyms: dict[int, str] | None = None

    def _load(self) -> Any:
        with self._lock:
            if self._tokenizer is None:
                import jieba
                import pypinyin
                from pypinyin.constants import PINYIN_DICT

                jieba.setLogLevel(logging.WARNING)
                tokenizer = jieba.Tokenizer()
                if self._cache_dir is not None:
                    self._cache_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
                    tokenizer.tmp_dir = str(self._cache_dir)
                    tokenizer.cache_file = "jieba.cache"
                    tokenizer.initialize()
                else:
                    # No cache file at all rather than one in the shared temp directory
                    # (jieba's default, where another user could plant a marshal file).
                    tokenizer.FREQ, tokenizer.total = tokenizer.gen_pfdict(tokenizer.get_dict_file())
                    tokenizer.initialized = True
                for term in self._terms:
                    tokenizer.add_word(term, freq=max(_TERM_FREQ, tokenizer.FREQ.get(term, 0)))
                self._pinyin = pypinyin
                self._heteronyms = PINYIN_DICT
                self._tokenizer = tokenizer
            return self._tokenizer

    def warm(self) -> None:
        """Load jieba and pypinyin now (a service calls this at start)."""
        self._load()
        self.read(" 预热", 1, 3)

    def read(self, text: str, start: int, end: int) -> list[Token]:
        """Tokens for ``text[start:end]``, reading polyphones with the whole ``text``
        as context."""
        tokenizer = self._load()
        overrides = context_readings(text)
        out: list[Token] = []
        i = start
        while i < end:
            ch = text[i]
            if is_han(ch):
                j = i
                while j < end and is_han(text[j]):
                    j += 1
                out.extend(self._read_run(tokenizer, text, i, j, overrides))
                i = j
                continue
            mark = _PAUSES.get(ch)
            if mark is not None:
                out.append(Token(ch, mark, "pause", "text", ch))
            elif not ch.isspace():
                _LOGGER.debug("no reading for %r; left out", ch)
            i += 1
        return out

    def _read_run(self, tokenizer: Any, text: str, start: int, end: int, overrides: dict[int, str]) -> list[Token]:
        out: list[Token] = []
        pos = start
        for word in tokenizer.cut(text[start:end], HMM=False):
            out.append(self._read_word(word, pos, overrides))
            pos += len(word)
        return out

    def _read_word(self, word: str, pos: int, overrides: dict[int, str]) -> Token:
        shipped = self._terms.get(word)
        if shipped is not None:
            return Token(word, shipped, "zh", "shipped", word, True)
        syllables = self.syllables(word)
        source = "model"
        for i, j, reading in self._terms_inside(word):
            # A shipped name inside a longer dictionary word (洪洞县 holds 洪洞).
            syllables[i:j] = reading.split()
            source = "shipped"
        pinned = source == "shipped"
        heteronyms = self._heteronyms or {}
        for k, ch in enumerate(word):
            rule = overrides.get(pos + k)
            if rule is not None:
                pinned = True
                syllables[k] = rule
            elif ch in "一不" or (len(word) == 1 and ch in CITATION):
                syllables[k] = CITATION[ch]
            if "," in heteronyms.get(ord(ch), ""):
                pinned = True
        return Token(word, " ".join(s for s in syllables if s), "zh", source, word, pinned)

    def _terms_inside(self, word: str) -> list[tuple[int, int, str]]:
        """Shipped terms inside ``word``, leftmost-longest (words are short: a few
        characters, so a direct search beats an automaton)."""
        out: list[tuple[int, int, str]] = []
        i = 0
        n = len(word)
        while n > 2 and i < n - 1:
            for j in range(n, i + 1, -1):
                reading = self._terms.get(word[i:j])
                if reading is not None and len(reading.split()) == j - i:
                    out.append((i, j, reading))
                    i = j - 1
                    break
            i += 1
        return out

    def syllables(self, word: str) -> list[str]:
        """pypinyin's reading of a word, one syllable per character, tone 5 for neutral."""
        self._load()
        style = self._pinyin.Style.TONE3
        got: list[str] = self._pinyin.lazy_pinyin(word, style=style, neutral_tone_with_five=True, v_to_u=False)
        if len(got) != len(word) or any(split_syllable(s) is None for s in got):
            # A character pypinyin has no reading for: keep the count right, say nothing.
            got = [s if split_syllable(s) else "" for s in _per_char(self._pinyin, word)]
        return got


def _per_char(pinyin: Any, word: str) -> Iterable[str]:
    for ch in word:
        got = pinyin.lazy_pinyin(ch, style=pinyin.Style.TONE3, neutral_tone_with_five=True)
        yield got[0] if got else ""
