"""English phonemes for Kokoro: espeak-ng's IPA mapped to Kokoro's symbols.

misaki's own English G2P needs a spaCy model downloaded at run time, so English words and
letters are given to the app's espeak-ng (``EspeakSynth.ipa``, American English, ``^``
ties) and its IPA is rewritten with the table of misaki 0.9.4's ``EspeakFallback``
(``misaki/espeak.py``, Apache-2.0), American branch, model version 1.0. misaki's module
imports phonemizer at import time, which this app does not install, so the table is
restated here; ``tests/test_kokoro_phonemes.py`` checks it against the installed misaki
source, so a drift is caught.

Kokoro writes diphthongs as single capital letters (``A`` = eɪ, ``I`` = aɪ, ``W`` = aʊ,
``Y`` = ɔɪ, ``O`` = oʊ) and the flap as ``T``; that is what the table produces.
"""

from __future__ import annotations

import logging
import re

__all__ = ["E2M", "from_espeak"]

_LOGGER = logging.getLogger(__name__)

_SYLLABIC = "\u0329"
#: espeak IPA (``^`` ties) -> Kokoro, longest first (misaki ``EspeakFallback.E2M``).
E2M: list[tuple[str, str]] = sorted(
    {
        "ʔˌn" + _SYLLABIC: "ʔn", "ʔn" + _SYLLABIC: "ʔn",
        "a^ɪ": "I", "a^ʊ": "W",
        "d^ʒ": "ʤ",
        "e^ɪ": "A", "e": "A",
        "t^ʃ": "ʧ",
        "ɔ^ɪ": "Y",
        "ə^l": "ᵊl",
        "ʲo": "jo", "ʲə": "jə", "ʲ": "",
        "ɚ": "əɹ",
        "r": "ɹ",
        "x": "k", "ç": "k",
        "ɐ": "ə",
        "ɬ": "l",
        "\u0303": "",
    }.items(),
    key=lambda kv: -len(kv[0]),
)  # fmt: skip


def from_espeak(ipa: str) -> str:
    """Kokoro phonemes of espeak-ng's American English IPA (``^``-tied)."""
    ps = ipa.strip()
    for old, new in E2M:
        ps = ps.replace(old, new)
    ps = re.sub(r"(\S)\u0329", r"ᵊ\1", ps).replace("\u0329", "")
    # American English, as misaki's fallback with british=False.
    ps = ps.replace("o^ʊ", "O").replace("ɜːɹ", "ɜɹ").replace("ɜː", "ɜɹ").replace("ɪə", "iə").replace("ː", "")
    ps = ps.replace("o", "ɔ")  # espeak < 1.52 wrote o for ɔ; misaki maps it for every version
    ps = ps.replace("ɾ", "T").replace("ʔ", "t")  # the flap and glottal stop of Kokoro v1.0
    return ps.replace("^", "")
