"""The style vocabulary of the builtin engine: instruction words mapped to prosody.

A style instruction is free text ("slow and happy", "慢一点，开心"); known words are
looked up in the table below and their effects multiply (rate, range, energy) or add
(pitch, in semitones). Words of no effect ("and", "a bit", "please", "一点", "语气") are
skipped silently; any other word is ignored and reported in
``Synthesis.info["ignored_style_words"]`` so that the caller can tell the user. A
trailing ``<|endofprompt|>`` (CosyVoice instruct syntax) is stripped.

========================================  ======  =========  =======  ======
words                                     rate    pitch st   range    energy
========================================  ======  =========  =======  ======
slow, slowly, slower, 慢, 缓慢, 慢速      x0.75
fast, quickly, faster, quick, 快, 快速    x1.30
loud, loudly, louder, 大声, 响亮                  +1                  x1.6
soft, softly, quiet, quietly, whisper,                                x0.5
轻声, 小声, 柔和, 轻柔
happy, cheerful, joyful, 开心, 高兴, 快乐  x1.08   +2         x1.4
sad, sadly, unhappy, 悲伤, 难过, 伤心      x0.85   -2         x0.6     x0.8
calm, calmly, gentle, 平静, 冷静, 温柔     x0.92              x0.7
excited, excitedly, 激动, 兴奋             x1.15   +3         x1.6     x1.2
pitch up, higher, high, 高音, 高声, 高                +4
pitch down, lower, low, deep, 低音,                  -4
低沉, 低声, 低
========================================  ======  =========  =======  ======

Why these directions: they follow how people change prosody for these attitudes (sad
speech is slower, lower and flatter; excited speech faster, higher and wider), so
that each word is audible and measurable. "Loud"/"soft" change the output level
(RMS) but the output never clips: the level is shaped by a soft limiter.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field

__all__ = ["StyleEffect", "parse_style"]

_LOGGER = logging.getLogger(__name__)

_END_OF_PROMPT = "<|endofprompt|>"


@dataclass(frozen=True)
class StyleEffect:
    """Prosody change requested by a style instruction; neutral by default."""

    rate: float = 1.0
    """Speaking-rate factor (>1 faster)."""
    pitch: float = 0.0
    """Pitch shift in semitones."""
    range: float = 1.0
    """Pitch-range factor (<1 flatter)."""
    energy: float = 1.0
    """Level factor applied before the soft limiter."""
    words: tuple[str, ...] = ()
    """The vocabulary words recognised, in order."""
    ignored: tuple[str, ...] = field(default=())
    """Words not in the vocabulary, in order."""


# (rate, pitch, range, energy)
_EFFECTS: dict[str, tuple[float, float, float, float]] = {
    "slow": (0.75, 0.0, 1.0, 1.0),
    "fast": (1.30, 0.0, 1.0, 1.0),
    "loud": (1.0, 1.0, 1.0, 1.6),
    "soft": (1.0, 0.0, 1.0, 0.5),
    "happy": (1.08, 2.0, 1.4, 1.0),
    "sad": (0.85, -2.0, 0.6, 0.8),
    "calm": (0.92, 0.0, 0.7, 1.0),
    "excited": (1.15, 3.0, 1.6, 1.2),
    "higher": (1.0, 4.0, 1.0, 1.0),
    "lower": (1.0, -4.0, 1.0, 1.0),
}

_SYNONYMS: dict[str, str] = {
    "slow": "slow", "slowly": "slow", "slower": "slow", "慢": "slow", "缓慢": "slow", "慢速": "slow",
    "fast": "fast", "quickly": "fast", "faster": "fast", "quick": "fast", "快": "fast", "快速": "fast",
    "loud": "loud", "loudly": "loud", "louder": "loud", "大声": "loud", "响亮": "loud",
    "soft": "soft", "softly": "soft", "quiet": "soft", "quietly": "soft", "whisper": "soft",
    "轻声": "soft", "小声": "soft", "柔和": "soft", "轻柔": "soft",
    "happy": "happy", "cheerful": "happy", "joyful": "happy", "开心": "happy", "高兴": "happy", "快乐": "happy",
    "sad": "sad", "sadly": "sad", "unhappy": "sad", "悲伤": "sad", "难过": "sad", "伤心": "sad",
    "calm": "calm", "calmly": "calm", "gentle": "calm", "平静": "calm", "冷静": "calm", "温柔": "calm",
    "excited": "excited", "excitedly": "excited", "激动": "excited", "兴奋": "excited",
    "pitch up": "higher", "higher": "higher", "high": "higher", "高音": "higher", "高声": "higher", "高": "higher",
    "pitch down": "lower", "lower": "lower", "low": "lower", "deep": "lower",
    "低音": "lower", "低沉": "lower", "低声": "lower", "低": "lower",
}  # fmt: skip

_FILLERS = frozenset(
    ["a", "an", "and", "the", "with", "in", "very", "more", "much", "bit", "little", "slightly", "please",
     "speak", "say", "talk", "voice", "tone", "style", "manner", "way", "read", "it", "like", "sound", "but",
     "also", "rather", "quite", "somewhat"]
) | frozenset(
    ["一点", "一些", "一下", "点", "些", "地", "的", "得", "和", "并且", "而且", "又", "请", "用", "说", "说话",
     "语气", "声音", "音调", "语速", "很", "非常", "特别", "有点", "稍微", "比较", "更", "再", "地说", "读"]
)  # fmt: skip

# Longest first, so that "pitch up" wins over "pitch" and "低沉" over "低".
_CHINESE_TERMS = sorted([w for w in list(_SYNONYMS) + list(_FILLERS) if not w.isascii()], key=len, reverse=True)
_HAN_PUNCT = re.compile(r"[\s,，。、;；:：!！?？.\"'“”‘’()（）\[\]【】<>《》~～\-—/|]+")


def parse_style(style: str) -> StyleEffect:
    """Parse a style instruction into a :class:`StyleEffect`."""
    text = style.strip()
    while text.endswith(_END_OF_PROMPT):
        text = text[: -len(_END_OF_PROMPT)].rstrip()
    text = text.replace(_END_OF_PROMPT, " ").lower()
    text = re.sub(r"\bpitch[\s-]+up\b", " pitch_up ", text)
    text = re.sub(r"\bpitch[\s-]+down\b", " pitch_down ", text)
    words: list[str] = []
    ignored: list[str] = []
    for piece in _HAN_PUNCT.split(text):
        if not piece:
            continue
        for token in re.findall(r"pitch_up|pitch_down|[a-z]+(?:'[a-z]+)?|[0-9]+|[^\x00-\x7f]+", piece):
            if token.isascii():
                key = token.replace("_", " ")
                if key in _SYNONYMS:
                    words.append(_SYNONYMS[key])
                elif key not in _FILLERS:
                    ignored.append(key)
            else:
                _scan_chinese(token, words, ignored)
    rate, pitch, rng, energy = 1.0, 0.0, 1.0, 1.0
    for word in words:
        r, p, g, e = _EFFECTS[word]
        rate, pitch, rng, energy = rate * r, pitch + p, rng * g, energy * e
    return StyleEffect(rate, pitch, rng, energy, tuple(words), tuple(ignored))


def _scan_chinese(token: str, words: list[str], ignored: list[str]) -> None:
    """Greedy longest match of vocabulary terms in a run of CJK text; the text between
    matches is reported as one ignored word."""
    unknown = ""
    i = 0
    while i < len(token):
        for term in _CHINESE_TERMS:
            if token.startswith(term, i):
                if unknown:
                    ignored.append(unknown)
                    unknown = ""
                if term in _SYNONYMS:
                    words.append(_SYNONYMS[term])
                i += len(term)
                break
        else:
            unknown += token[i]
            i += 1
    if unknown:
        ignored.append(unknown)
