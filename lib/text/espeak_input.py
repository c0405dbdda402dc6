"""What espeak-ng must be given so that it says a reading, not its own guess.

Mandarin syllables go in as espeak-ng phoneme input (``[[...]]``, with the
``espeakPHONEMES`` flag) in the ``cmn`` voice, built from pinyin by rules: an initial,
an optional glide, the stress mark, the final's nucleus, the tone as espeak's pitch
contour digits (1 ``55``, 2 ``35``, 3 ``214``, 4 ``51``, neutral ``11``) and the coda.
The rules follow espeak-ng 1.52's own reading of tone-numbered pinyin, checked syllable
by syllable by ``tests/test_text_espeak.py`` against the app's espeak: 2,040 of the
2,125 syllable-tone pairs are identical; the other 17 syllables are where espeak's
pinyin rules are irregular or fail (:data:`ESPEAK_DIFFERS`), and the rule here is the
regular form (``xiong``: espeak reads the letters as English; ``shun``/``shuo``/``shui``, ``guan``,
``kuan``, ``hun``, ``kun``, ``tun``, ``qun``: an odd glide or vowel).

Letters and English words are given as text: espeak's cmn voice switches to English
for Latin script and says letter names and words right. Pauses are given as their
marks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from lib.text.syllables import split_syllable, unit_kind
from lib.text.tokens import Reading

__all__ = ["ESPEAK_DIFFERS", "EspeakInput", "espeak_input", "pinyin_phonemes"]

_LOGGER = logging.getLogger(__name__)

_INITIALS = {
    "b": "p", "p": "ph", "m": "m", "f": "f", "d": "t", "t": "th", "n": "n", "l": "l", "g": "k", "k": "kh",
    "h": "X", "j": "tS;", "q": "tS;h", "x": "S;", "zh": "ts.", "ch": "ts.h", "sh": "s.", "r": "z.", "z": "ts",
    "c": "tsh", "s": "s", "y": "j", "w": "w",
}  # fmt: skip
_TONES = {1: "55", 2: "35", 3: "214", 4: "51", 5: "11"}

#: final -> (glide after the initial, nucleus, coda), after a consonant initial.
_FINALS: dict[str, tuple[str, str, str]] = {
    "a": ("", "A", ""), "ai": ("", "ai", ""), "an": ("", "a", "n"), "ang": ("", "A", "N"), "ao": ("", "Au", ""),
    "e": ("", "o-", ""), "ei": ("", "ei", ""), "en": ("", "@", "n"), "eng": ("", "@", "N"), "er": ("", "@r", ""),
    "o": ("", "o", ""), "ong": ("", "ong", ""), "ou": ("", "ou", ""), "i": ("", "i", ""), "ia": ("", "iA", ""),
    "ian": ("", "iE", "n"), "iang": ("", "iA", "N"), "iao": ("j", "Au", ""), "ie": ("", "iE", ""),
    "in": ("", "i", "n"), "ing": ("", "i", "N"), "iu": ("", "iou", ""), "iong": ("j", "ong", ""),
    "io": ("", "io", ""), "u": ("", "u", ""), "ua": ("w", "A", ""), "uai": ("", "uai", ""), "uan": ("", "ua", "n"),
    "uang": ("w", "A", "N"), "ui": ("", "uei", ""), "un": ("", "u@", "n"), "uo": ("", "uo", ""),
    "v": ("", "y", ""), "ve": ("", "yE", ""), "ue": ("", "yE", ""), "van": ("", "y&", "n"), "vn": ("", "y@", "n"),
}  # fmt: skip
#: After j, q, x (and y) a written u is ü.
_AFTER_JQX = {"u": "v", "ue": "ve", "uan": "van", "un": "vn"}
#: y- and w- spellings: the final they write, without the initial (espeak says y as
#: the glide j and w as w).
_Y = {
    "ya": "ia", "yan": "ian", "yang": "iang", "yao": "iao", "ye": "ie", "you": "iu", "yong": "ong", "yi": "i",
    "yin": "in", "ying": "ing", "yo": "io", "yu": "v", "yue": "ve", "yuan": "van", "yun": "vn",
}  # fmt: skip
_W = {
    "wa": ("", "A", ""), "wai": ("", "ai", ""), "wan": ("", "A", "n"), "wang": ("", "A", "N"), "wei": ("", "ei", ""),
    "wen": ("", "u@", "n"), "weng": ("", "u@", "N"), "wo": ("", "o", ""), "wu": ("", "u", ""), "wong": ("", "ong", ""),
}  # fmt: skip
#: Syllabic nasals: initial and the nasal said as the syllable.
_NASALS = {"m": ("", "m-"), "n": ("", "n-"), "ng": ("", "N-"), "hm": ("X", "m-"), "hng": ("X", "N-")}

#: Syllables whose phonemes here differ from espeak-ng 1.52's reading of the same
#: tone-numbered pinyin (its rules fail or are irregular there); every other syllable
#: in the table gets exactly espeak's phonemes.
ESPEAK_DIFFERS = frozenset(
    ["hm", "hng", "m", "n", "jiong", "qiong", "xiong", "wong", "guan", "kuan", "hun", "kun", "tun", "shun", "shuo",
     "shui", "qun"]
)  # fmt: skip


def pinyin_phonemes(unit: str) -> str:
    """espeak-ng ``cmn`` phonemes of one pinyin syllable with tone (``xing2`` ->
    ``S;'i35N``); :class:`ValueError` if it is not a valid syllable."""
    split = split_syllable(unit)
    if split is None:
        raise ValueError(f"{unit!r} is not a pinyin syllable with a tone 1-5")
    syllable, tone = split
    contour = _TONES[tone]
    if syllable in _NASALS:
        initial, nasal = _NASALS[syllable]
        return f"{initial}'{nasal}{contour}"
    if syllable in _W:
        glide, nucleus, coda = _W[syllable]
        return f"w{glide}'{nucleus}{contour}{coda}"
    if syllable in _Y:
        glide, nucleus, coda = _FINALS[_Y[syllable]]
        return f"j'{nucleus}{contour}{coda}"
    initial = next((i for i in ("zh", "ch", "sh") if syllable.startswith(i)), syllable[:1])
    if initial not in _INITIALS:
        initial = ""
    final = syllable[len(initial) :]
    if initial in ("j", "q", "x"):
        final = _AFTER_JQX.get(final, final)
    glide, nucleus, coda = _FINALS[final]
    if final == "i" and initial in ("z", "c", "s"):
        nucleus = "i["
    elif final == "i" and initial in ("zh", "ch", "sh", "r"):
        nucleus = "i."
    elif final == "e" and initial in ("d", "t", "n", "l"):
        # espeak's reduced schwa for the (mostly neutral-tone) 的 得 特 呢 了 syllables.
        nucleus = "@"
    return f"{_INITIALS.get(initial, '')}{glide}'{nucleus}{contour}{coda}"


@dataclass(frozen=True, slots=True)
class EspeakInput:
    """What to hand to :meth:`lib.engines.builtin.espeak.EspeakSynth.synth`."""

    text: str
    """The input text: ``[[phonemes]]`` blocks, letters, words, pause marks."""
    phonemes: bool
    """Pass ``phonemes=True`` (the text has ``[[...]]`` blocks)."""
    language: str
    """The voice's language: ``cmn`` for a Mandarin reading, ``en`` for English."""


def espeak_input(reading: Reading) -> EspeakInput:
    """What espeak-ng must be given to say ``reading``.

    A Mandarin reading (``reading.language == "zh"``) is for the ``cmn`` voice: every
    syllable as phonemes, letters and English words as text. An English reading is
    for an English voice: the words as text (they are already spelt out: numbers,
    abbreviations), Mandarin syllables inside it as pinyin text (espeak's English
    voice has no Mandarin phonemes; it is the best it can do)."""
    if reading.language != "zh":
        return EspeakInput(_plain(reading), False, "en")
    parts: list[str] = []
    block: list[str] = []

    def flush() -> None:
        if block:
            parts.append("[[" + " ".join(block) + "]]")
            block.clear()

    for token in reading.tokens:
        if token.kind == "pause":
            flush()
            parts.append(token.reading)
            continue
        for unit in token.units:
            kind = unit_kind(unit)
            if kind == "syllable":
                block.append(pinyin_phonemes(unit))
            elif kind in ("letter", "word"):
                flush()
                parts.append(unit)
            else:
                _LOGGER.warning("reading unit %r cannot be spoken; left out", unit[:32])
    flush()
    return EspeakInput(_join(parts), True, "cmn")


def _join(parts: list[str]) -> str:
    out = ""
    for part in parts:
        if part in (",", ".", "?", "!"):
            out += part
        else:
            out += (" " if out else "") + part
    return out


def _plain(reading: Reading) -> str:
    # Mandarin inside English: the syllables without tone numbers, which an English
    # voice at least says as syllables ("ni3" would be "ni three").
    parts = [t.reading if t.kind != "zh" else " ".join(u.rstrip("12345") for u in t.units) for t in reading.tokens]
    return _join([p for p in parts if p])
