"""The reading is the one way text reaches an engine: what the front end (with the
operator's lexicon) decides is what every engine says, and a lexicon edit changes the
audio and the key together, and undoing it brings the first audio back from the cache."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

from lib.config import load_config
from lib.engines.cosyvoice.reading import cosyvoice_text, inline_pinyin
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.types import TTSRequest
from lib.text import read
from lib.text.tokens import Reading, Token
from tests.cosyvoice_code import upstream_dir

TERM, DEFAULT, OURS = "重庆", "chong2 qing4", "zhong4 qing4"
TEXT = "下一站重庆北站。"


def _request(text: str = TEXT, voice: str = "zh-female") -> TTSRequest:
    return TTSRequest(text=text, voice=voice, seed=0)


def test_tone_engine_records_the_reading_it_was_given(tmp_path: Path) -> None:
    from lib.engines.tone import ToneEngine

    engine = ToneEngine()
    config = load_config(env={}, overrides={
        "engine": "tone", "cache.dir": str(tmp_path / "cache"), "voices.prewarm": False,
        "readings.lexicon": str(tmp_path / "lexicon.json"),
    })  # fmt: skip
    service = TTSService(config, engine, admin_token=None)
    try:
        first = service.synthesise(_request(voice="tone-high"))
        service.readings.add(TERM, OURS, caller=LOCAL)
        second = service.synthesise(_request(voice="tone-high"))
        service.synthesise(_request("第二句，没有那个词。", voice="tone-high"))
    finally:
        service.close()
    said = [" ".join(t.reading for t in r.tokens if t.text == TERM) for r in engine.readings]
    assert said == [DEFAULT, OURS, ""]
    ours = next(t for t in engine.readings[1].tokens if t.text == TERM)
    assert ours.source == "lexicon" and ours.pinned
    assert first.key != second.key and second.cache == "MISS"


def _builtin_service(tmp_path: Path, base: str) -> TTSService:
    config = load_config(env={}, overrides={
        "engine": "builtin", "builtin.base": base, "cache.dir": str(tmp_path / "cache"), "voices.prewarm": False,
        "readings.lexicon": str(tmp_path / "lexicon.json"),
    })  # fmt: skip
    return TTSService(config, admin_token=None)


def _lexicon_round_trip(service: TTSService) -> None:
    first = service.synthesise(_request())
    service.readings.add(TERM, OURS, caller=LOCAL)
    edited = service.synthesise(_request())
    service.readings.remove(TERM, caller=LOCAL)
    back = service.synthesise(_request())
    a, b, c = (x.audio.pcm for x in (first, edited, back))
    # The edit reaches the audio (another reading is said), not only the key.
    assert edited.key != first.key and edited.cache == "MISS"
    assert a.shape != b.shape or not np.array_equal(a, b)
    # Removing the entry returns to the first key, served from the cache, same audio.
    assert back.key == first.key and back.cache == "HIT" and np.array_equal(a, c)


def test_espeak_base_says_the_lexicon_reading(tmp_path: Path) -> None:
    service = _builtin_service(tmp_path, "espeak")
    try:
        _lexicon_round_trip(service)
    finally:
        service.close()


@pytest.mark.kokoro
def test_kokoro_base_says_the_lexicon_reading(tmp_path: Path) -> None:
    service = _builtin_service(tmp_path, "kokoro")
    try:
        if not service.engine.model_version.startswith("builtin-kokoro"):
            pytest.fail("the Kokoro base is not installed (run ./run.sh test, which installs its voices)")
        _lexicon_round_trip(service)
    finally:
        service.close()


def test_espeak_base_reads_numbers_as_the_front_end_does(tmp_path: Path) -> None:
    """A code is said as the front end reads it ("A 零 二 三", not "A twenty-three"):
    the audio of the text and of its spoken reading written out are the same."""
    from lib.config import BuiltinConfig
    from lib.engines.builtin import BuiltinEngine

    engine = BuiltinEngine(BuiltinConfig(base="espeak"))
    try:
        voice = engine.preset_voice("zh-female")
        code = engine.synthesise("请A023号顾客", voice, style="", seed=0, speed=1.0, mode="preset")
        written = engine.synthesise("请A零二三号顾客", voice, style="", seed=0, speed=1.0, mode="preset")
    finally:
        engine.close()
    assert np.array_equal(code.audio, written.audio)


# -- CosyVoice: the text it is given ------------------------------------------------------


def _upstream_vocabulary() -> frozenset[str]:
    """CosyVoice3's pinyin tokens, read from the upstream tokenizer's source."""
    source = upstream_dir() / "cosyvoice" / "tokenizer" / "tokenizer.py"
    if not source.is_file():
        pytest.skip(f"the upstream CosyVoice source is not at {source.parent.parent.parent}")
    found: set[str] = set()
    for node in ast.walk(ast.parse(source.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("["):
            found.add(node.value)
    assert "[j]" in found and "[ǐ]" in found
    return frozenset(found)


def test_cosyvoice3_gets_pinned_readings_as_its_pinyin_tokens() -> None:
    vocab = _upstream_vocabulary()
    assert inline_pinyin("ji3", vocab) == "[j][ǐ]"
    assert inline_pinyin("zhong4", vocab) == "[zh][òng]"
    assert inline_pinyin("qing4", vocab) == "[q][ìng]"
    assert inline_pinyin("lv4", vocab) == "[l][ǜ]"
    assert inline_pinyin("hang2", vocab) == "[h][áng]"
    pinned = Token(TERM, OURS, "zh", "lexicon", pinned=True)
    plain = Token("北站", "bei3 zhan4", "zh", "model")
    reading = Reading(
        (Token("下一站", "xia4 yi1 zhan4", "zh", "model"), pinned, plain, Token("。", ".", "pause", "text"))
    )
    assert cosyvoice_text(reading, vocab) == "下一站[zh][òng][q][ìng]北站。"
    # Models without pinyin tokens (CosyVoice-300M, CosyVoice2) get the characters.
    assert cosyvoice_text(reading, frozenset()) == "下一站重庆北站。"


def test_cosyvoice_text_is_the_spoken_reading() -> None:
    reading = read("请A023号顾客到3号窗口，ID卡")
    text = cosyvoice_text(reading)
    assert "023" not in text and "零二三" in text  # the code as the front end reads it
    assert "I D" in text or "ID" in text
