"""What CosyVoice is given to say a reading: text, with inline pinyin where it can take it.

CosyVoice reads text (its own normaliser and grapheme-to-phoneme inside), so a reading
reaches it as the reading's *spoken* text (:attr:`lib.text.tokens.Token.say`): numbers,
codes and dates already written as the words the front end chose (``幺二零``, ``A 零
二 三``). Where the loaded model's tokenizer has pinyin tokens (CosyVoice3's
"pronunciation inpainting": ``[j][ǐ]``, an initial and a tone-marked final per syllable),
a *pinned* Mandarin token -- an operator's lexicon entry, a polyphone decided in
context -- is given as those tokens, so the model says the decided reading instead of
guessing from the characters. A syllable the tokenizer has no token for keeps its
characters (the whole token does, so a word is never half pinyin).
"""

from __future__ import annotations

from collections.abc import Collection

from lib.text.syllables import split_syllable
from lib.text.tokens import Reading, Token

__all__ = ["VERSION", "cosyvoice_text", "inline_pinyin"]

#: Part of the engine's model version: how a reading becomes CosyVoice's text.
VERSION = "reading-1"

_INITIALS = ("zh", "ch", "sh", "b", "p", "m", "f", "d", "t", "n", "l", "g", "k", "h", "j", "q", "x", "r", "z", "c",
             "s", "y", "w")  # fmt: skip
_MARKS = {"a": "āáǎà", "e": "ēéěè", "i": "īíǐì", "o": "ōóǒò", "u": "ūúǔù", "ü": "ǖǘǚǜ"}


def _marked(final: str, tone: int) -> str:
    """``final`` with its tone mark (none for the neutral tone 5), by the usual rule:
    on ``a`` or ``e`` when there is one, on the ``o`` of ``ou``, else on the last vowel."""
    if tone == 5 or not any(ch in _MARKS for ch in final):
        return final
    if "a" in final:
        at = final.index("a")
    elif "e" in final:
        at = final.index("e")
    elif "ou" in final:
        at = final.index("o")
    else:
        at = max(i for i, ch in enumerate(final) if ch in _MARKS)
    return final[:at] + _MARKS[final[at]][tone - 1] + final[at + 1 :]


def inline_pinyin(unit: str, vocabulary: Collection[str]) -> str | None:
    """``[j][ǐ]`` for ``ji3`` when both tokens are in ``vocabulary``, else None."""
    parsed = split_syllable(unit)
    if parsed is None:
        return None
    syllable, tone = parsed
    initial = next((i for i in _INITIALS if syllable.startswith(i) and len(syllable) > len(i)), "")
    final = syllable[len(initial) :]
    # ü is written u after j, q, x and y, and v in this app's units; the tokens spell it ü
    # (a bare final) or v (``[vè]``).
    if initial in ("j", "q", "x", "y") and final.startswith("u"):
        final = "v" + final[1:]
    candidates = [_marked(final.replace("v", "ü"), tone)]
    if "v" in final:
        candidates.append(final[0] + _marked(final[1:], tone) if len(final) > 1 else "")
    pieces = [f"[{initial}]"] if initial else []
    for candidate in candidates:
        if candidate and f"[{candidate}]" in vocabulary and all(p in vocabulary for p in pieces):
            return "".join([*pieces, f"[{candidate}]"])
    return None


def _token_text(token: Token, vocabulary: Collection[str]) -> str:
    if token.kind == "zh" and token.pinned and vocabulary:
        inline = [inline_pinyin(u, vocabulary) for u in token.units]
        if inline and all(part is not None for part in inline):
            return "".join(part for part in inline if part is not None)
    return token.say


def cosyvoice_text(reading: Reading, vocabulary: Collection[str] = ()) -> str:
    """The text CosyVoice is given for ``reading``; ``vocabulary``: the model's special
    tokens (empty for models without pinyin tokens: the spoken text only). Latin words
    and letters are kept apart from their neighbours by spaces."""
    out = ""
    previous_latin = False
    for token in reading.tokens:
        piece = _token_text(token, vocabulary)
        if not piece:
            continue
        latin = token.kind in ("en", "letters")
        if (latin and out and not out.endswith(" ")) or (previous_latin and token.kind == "zh"):
            out += " "
        out += piece
        previous_latin = latin
    return out.strip()
