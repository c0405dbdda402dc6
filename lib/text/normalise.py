"""Text normalisation. The normalised text is both the cache-key field and exactly what
the engine synthesises, so two requests with the same key are the same request by
construction."""

from __future__ import annotations

import re
import unicodedata

__all__ = ["BIDI_CONTROLS", "normalise_text"]

# Zero-width characters that change the bytes but not what anyone hears.
_ZERO_WIDTH = "\u200b\u200c\u200d\u2060\ufeff"
# Bidirectional controls (embeddings, overrides, isolates, LRM/RLM, the Arabic letter
# mark): they only reorder how text is *displayed*, are never spoken, and in front of
# "Hello world" they made the engine's script detection call the text unspeakable.
BIDI_CONTROLS = "\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069\u200e\u200f\u061c"
_DROPPED = dict.fromkeys(map(ord, _ZERO_WIDTH + BIDI_CONTROLS))
# After NFKC, \s in Python's re covers U+3000 and no-break spaces too.
_SPACE_RUN = re.compile(r"\s+")
# Full-width Chinese punctuation -> ASCII (only with fold_punctuation). NFKC already
# maps the full-width forms block (！ → !), so this covers what NFKC keeps.
_PUNCT = str.maketrans(
    {
        "，": ",", "。": ".", "、": ",", "；": ";", "：": ":", "？": "?", "！": "!",
        "“": '"', "”": '"', "‘": "'", "’": "'", "（": "(", "）": ")",
        "《": '"', "》": '"', "【": "[", "】": "]", "—": "-", "…": "...",
    }
)  # fmt: skip


def normalise_text(text: str, *, fold_punctuation: bool = False, casefold: bool = False) -> str:
    """NFKC, drop zero-width characters and bidirectional controls, fold every run of
    white space to one space, trim. Optionally fold Chinese punctuation to ASCII and
    case-fold. Idempotent."""
    out = unicodedata.normalize("NFKC", text).translate(_DROPPED)
    if fold_punctuation:
        out = out.translate(_PUNCT)
    if casefold:
        out = out.casefold()
        # casefold can yield characters NFKC would change again (e.g. ß -> ss is fine,
        # but some compatibility forms reappear): normalise once more for idempotence.
        out = unicodedata.normalize("NFKC", out)
    return _SPACE_RUN.sub(" ", out).strip()
