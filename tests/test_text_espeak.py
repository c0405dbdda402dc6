"""The espeak-ng input of a reading (issue 27), checked against the app's own espeak
(espeakng-loader's libespeak-ng 1.52 through lib/engines/builtin/espeak.py): the
syllable rules give espeak's own phonemes, phoneme input is honoured, and what the
engine says follows the reading -- a polyphone decision and a lexicon entry change the
audio, and deleting the entry brings it back."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from lib.engines.builtin.espeak import EspeakParams, EspeakSynth
from lib.text.espeak_input import ESPEAK_DIFFERS, espeak_input, pinyin_phonemes
from lib.text.frontend import FrontEnd
from lib.text.lexicon import Lexicon
from lib.text.syllables import SYLLABLES

CMN = EspeakParams(voice="cmn")


@pytest.fixture(scope="module")
def espeak() -> Iterator[EspeakSynth]:
    synth = EspeakSynth()
    yield synth
    synth.close()


def test_syllable_rules_give_espeaks_own_phonemes(espeak: EspeakSynth) -> None:
    units = [s + str(t) for s in SYLLABLES for t in range(1, 6)]
    own = espeak.phonemes(", ".join(units), "cmn").splitlines()
    assert len(own) == len(units)
    differ = {u[:-1] for u, o in zip(units, own, strict=True) if o.replace("_|", "").strip() != pinyin_phonemes(u)}
    # Equal everywhere except where espeak's pinyin rules fail or are irregular, and
    # that list is exact (a syllable that starts to agree must leave it).
    assert differ == ESPEAK_DIFFERS
    assert len(units) - 5 * len(differ) > 2000


def test_rule_phonemes_are_valid_espeak_phonemes(espeak: EspeakSynth) -> None:
    """espeak parses each rule-built syllable back to itself once phoneme input is on
    (the phonemes op runs in a fresh worker, so it is checked by audio): a syllable
    that espeak reads like the rule sounds exactly like the rule's phonemes."""
    for unit in ("xing2", "hang2", "lv4", "zhi1", "ri4", "er2", "yuan2"):
        said = espeak.synth(f"[[{pinyin_phonemes(unit)}]]", CMN, phonemes=True)
        assert np.array_equal(said, espeak.synth(unit, CMN)), unit
    for unit in sorted(u + "2" for u in ESPEAK_DIFFERS):
        assert len(espeak.synth(f"[[{pinyin_phonemes(unit)}]]", CMN, phonemes=True)) > 1000, unit


def test_phoneme_input_needs_the_flag(espeak: EspeakSynth) -> None:
    text = f"[[{pinyin_phonemes('ma1')}]]"
    assert not np.array_equal(espeak.synth(text, CMN, phonemes=True), espeak.synth(text, CMN))


def test_input_text_for_a_mixed_reading() -> None:
    front = FrontEnd()
    got = espeak_input(front.read("请出示您的ID卡。"))
    assert got.phonemes and got.language == "cmn"
    assert got.text == "[[tS;h'i214N ts.h'u55 s.'i.51 n'i35n t'@11]] I D [[kh'A214]]."
    english = espeak_input(front.read("Gate C7 is now closed."))
    assert (english.text, english.phonemes, english.language) == ("gate C seven is now closed.", False, "en")


def test_the_engine_says_the_reading(espeak: EspeakSynth) -> None:
    lexicon = Lexicon()
    front = FrontEnd(lexicon)

    def say(text: str) -> np.ndarray:
        got = espeak_input(front.read(text))
        return espeak.synth(got.text, CMN, phonemes=got.phonemes)

    # A polyphone decided in context reaches the audio: 行 in 银行 vs 步行.
    assert front.read("银行").reading == "yin2 hang2"
    bank = say("银行")
    lexicon.add("银行", "yin2 xing2")
    changed = say("银行")
    assert not np.array_equal(bank, changed)
    assert np.array_equal(changed, espeak.synth("[[" + " ".join(map(pinyin_phonemes, ("yin2", "xing2"))) + "]]",
                                                CMN, phonemes=True))  # fmt: skip
    lexicon.remove("银行")
    assert np.array_equal(say("银行"), bank)
    # The emergency number is said 幺幺零, not 一百一十 (espeak's own guess).
    assert not np.array_equal(say("拨打110"), espeak.synth("拨打110", CMN))
