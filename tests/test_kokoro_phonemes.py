"""Readings to Kokoro phonemes (lib/engines/builtin/kokoro/phonemes.py, english.py, vocab.py):
Mandarin by misaki's v1.0 rules, English and letters through the app's espeak-ng IPA, 一/不
sandhi, pauses, long sentences cut. Real misaki, pypinyin and espeak-ng; no model needed."""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from lib.engines.builtin.espeak import EspeakSynth
from lib.text.tokens import Reading, Token

pytestmark = pytest.mark.kokoro

if importlib.util.find_spec("misaki") is None:  # pragma: no cover - depends on the install
    pytest.skip("misaki is not installed (pip install -r requirements.txt)", allow_module_level=True)

from lib.engines.builtin.kokoro.english import E2M, from_espeak  # noqa: E402
from lib.engines.builtin.kokoro.phonemes import phonemise, sandhi, syllable_ipa  # noqa: E402
from lib.engines.builtin.kokoro.vocab import VOCAB, VOCAB_SHA256, to_ids  # noqa: E402


@pytest.fixture(scope="module")
def espeak() -> Iterator[EspeakSynth]:
    synth = EspeakSynth()
    yield synth
    synth.close()


def zh(text: str, reading: str, source: str = "model") -> Token:
    return Token(text, reading, "zh", source, spoken=text)


def pause(mark: str) -> Token:
    return Token(mark, mark, "pause", "text")


def test_mandarin_follows_misakis_v1_rules() -> None:
    """Syllable by syllable, the same phonemes as misaki's own v1.0 path on the same words."""
    from misaki.zh import ZHG2P

    words = [("今天", "jin1 tian1"), ("天气", "tian1 qi4"), ("很", "hen3"), ("好", "hao3"), ("绿色", "lv4 se4")]
    for word, reading in words:
        ours = "".join(syllable_ipa(s) for s in reading.split())
        assert ours == ZHG2P.word2ipa(word).replace("\u032f", ""), word
    assert syllable_ipa("zhong1").endswith("→ŋ") and syllable_ipa("hao3").endswith("↓")
    assert syllable_ipa("hua1r") == "" or syllable_ipa("huar1").endswith("ɚ")
    assert syllable_ipa("xyz9") == ""


def test_english_table_is_misakis(tmp_path: Path) -> None:
    """The restated EspeakFallback table equals the one in the installed misaki source."""
    spec = importlib.util.find_spec("misaki")
    assert spec is not None and spec.origin is not None
    source = (Path(spec.origin).parent / "espeak.py").read_text(encoding="utf-8")
    table = None
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "E2M" for t in node.targets):
            call = node.value
            assert isinstance(call, ast.Call)
            items = call.args[0]
            assert isinstance(items, ast.Call) and isinstance(items.func, ast.Attribute)
            table = ast.literal_eval(items.func.value)
    assert table is not None
    assert dict(E2M) == table


def test_english_words_and_letters_through_espeak(espeak: EspeakSynth) -> None:
    assert from_espeak(espeak.ipa(["today"])[0]) == "tədˈA"
    assert "I" in from_espeak(espeak.ipa(["time"])[0])  # the diphthong aɪ is Kokoro's I
    reading = Reading((Token("A", "A", "letters", "text"), Token("go", "go", "en", "text"), pause(".")), "en")
    (sentence,) = phonemise(reading, espeak.ipa)
    # A lone letter is its name (ˈA), not the article (ə); the pause ends the last word.
    assert sentence.chunks == ("ˈA ɡˈO.",)
    assert sentence.language == "en"


def test_mixed_sentence_is_one_sentence_in_its_main_language(espeak: EspeakSynth) -> None:
    reading = Reading(
        (zh("请", "qing3"), zh("出示", "chu1 shi4"), Token("ID", "I D", "letters", "text"), zh("卡", "ka3"),
         pause(","), Token("thank you", "thank you", "en", "text"), pause(".")),
        "zh",
    )  # fmt: skip
    (sentence,) = phonemise(reading, espeak.ipa)
    (chunk,) = sentence.chunks
    assert sentence.language == "zh"
    assert chunk.startswith("ʨʰi↓ŋ ꭧʰu→ʂɨ↘ ˈI dˈi kʰa↓, ")
    assert "θˈæŋk" in chunk and chunk.endswith(".")
    assert all(ch in VOCAB for ch in chunk)


def test_yi_and_bu_sandhi() -> None:
    tokens = [zh("一个", "yi1 ge4"), zh("一起", "yi1 qi3"), zh("第一", "di4 yi1"), zh("不是", "bu4 shi4"),
              zh("不好", "bu4 hao3"), zh("一二零八", "yi1 er4 ling2 ba1", "rule"), pause(","),
              zh("一百", "yi1 bai3", "rule"),
              zh("统一", "tong3 yi1")]  # fmt: skip
    out = sandhi(tokens)
    assert out == [["yi2", "ge4"], ["yi4", "qi3"], ["di4", "yi1"], ["bu2", "shi4"], ["bu4", "hao3"],
                   ["yi1", "er4", "ling2", "ba1"], [], ["yi4", "bai3"], ["tong3", "yi1"]]  # fmt: skip


def test_sentences_split_at_ends_and_long_ones_at_commas(espeak: EspeakSynth) -> None:
    clause = [zh("列车", "lie4 che1"), zh("即将", "ji2 jiang1"), zh("进站", "jin4 zhan4"), pause(",")]
    long = Reading(tuple(clause * 12 + [pause("."), zh("谢谢", "xie4 xie4"), zh("大家", "da4 jia1"), pause("!")]))
    first, second = phonemise(long, espeak.ipa, limit=100)
    assert len(first.chunks) > 1
    assert all(len(to_ids(c)) <= 100 for c in first.chunks)
    assert all(c.endswith((",", ".")) for c in first.chunks)  # cut at its commas
    assert second.chunks == ("ɕje↘ɕje↘ ta↘ʨja→!",)


def test_vocabulary_is_kokoros() -> None:
    digest = hashlib.sha256(json.dumps(VOCAB, ensure_ascii=False, sort_keys=True).encode()).hexdigest()
    assert len(VOCAB) == 114 and digest == VOCAB_SHA256
    assert to_ids("xau↓, ?") == [66, 43, 63, 169, 3, 16, 6]
    assert to_ids("x☃") == [66]  # symbols outside the vocabulary are dropped
