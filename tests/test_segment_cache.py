"""Sentence segments through the real cache (diskcache under ``tmp_path``): the tone
engine counts engine calls; the builtin engine makes real speech."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lib.cache.keys import KeyFields
from lib.compose.assemble import to_float, unit_loudness
from lib.compose.loudness import integrated_loudness
from lib.compose.segments import split
from lib.config import load_config
from lib.engines.tone import ToneEngine
from lib.errors import EngineError
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.types import TTSRequest

PARAGRAPH = "第一句话说的是天气。第二句话说的是交通！第三句话说的是时间？第四句话说的是地点。"


def make_service(
    tmp_path: Path, tts_engine: Any = None, env: dict[str, str] | None = None, **overrides: Any
) -> TTSService:
    values: dict[str, Any] = {"engine": "tone", "cache.dir": str(tmp_path / "cache"), "voices.prewarm": False}
    values.update(overrides)
    env = {"TTS_TEMPLATES_FILE": "null", **(env or {})}
    return TTSService(load_config(env=env, overrides=values), tts_engine if tts_engine is not None else ToneEngine())


#: No tail, no loudness target: short texts keep the keys and audio they had before segments.
UNFINISHED = {"TTS_SEGMENTS_LOUDNESS": "null", "TTS_SEGMENTS_TAIL": "0"}


@pytest.fixture
def engine() -> ToneEngine:
    return ToneEngine()


@pytest.fixture
def service(tmp_path: Path, engine: ToneEngine) -> Iterator[TTSService]:
    svc = make_service(tmp_path, engine)
    yield svc
    svc.close()


def speak(svc: TTSService, text: str, **fields: Any) -> Any:
    return svc.synthesise(TTSRequest(text=text, voice=fields.pop("voice", "tone-low"), **fields))


def segment_key(svc: TTSService, text: str, sentence: str) -> str:
    fields = svc.resolve(TTSRequest(text=text, voice="tone-low")).fields
    return dataclasses.replace(fields, text=sentence, finish="").key


def test_a_paragraph_is_one_engine_call_per_sentence_then_one_lookup(service: TTSService, engine: ToneEngine) -> None:
    first = speak(service, PARAGRAPH)
    assert (first.cache, engine.calls) == ("MISS", 4)
    assert first.info["segments"] == 4 and first.info["segments_synthesised"] == 4
    service.cache.flush()
    normalised = service.resolve(TTSRequest(text=PARAGRAPH, voice="tone-low")).fields.text  # ！ became !
    for sentence in (s.text for s in split(normalised, 80)):
        stored = service.cache.lookup(segment_key(service, PARAGRAPH, sentence))
        assert stored is not None and stored[0].meta["role"] == "segment"
        # measured once, when made: results that reuse the segment do not measure it again
        assert stored[0].meta["unit_lufs"] == unit_loudness(stored[0].pcm, stored[0].sample_rate)
    again = speak(service, PARAGRAPH)
    assert (again.cache, engine.calls) == ("HIT", 4)
    assert again.wav == first.wav
    whole = service.cache.lookup(first.key)
    assert whole is not None and whole[0].meta["role"] == "result" and len(whole[0].meta["segments"]) == 4


def test_an_edited_paragraph_synthesises_only_the_changed_sentence(service: TTSService, engine: ToneEngine) -> None:
    speak(service, PARAGRAPH)
    edited = PARAGRAPH.replace("交通", "交通状况")
    result = speak(service, edited)
    assert (result.cache, engine.calls) == ("MISS", 5)
    assert (result.info["segments_reused"], result.info["segments_synthesised"]) == (3, 1)
    assert service.dashboard.snapshot(caller=LOCAL)["since_start"]["segments_reused"] == 3


def test_a_sentence_is_a_hit_anywhere_its_key_ignores_position(service: TTSService, engine: ToneEngine) -> None:
    speak(service, PARAGRAPH)
    reordered = "第四句话说的是地点。第一句话说的是天气。新的一句在这里。"
    result = speak(service, reordered)
    assert (engine.calls, result.info["segments_reused"]) == (5, 2)


def test_a_short_text_is_one_entry_and_reuses_a_stored_sentence(service: TTSService, engine: ToneEngine) -> None:
    single = speak(service, "只有一句话而已。")
    service.cache.flush()
    assert engine.calls == 1 and service.cache.store.stats()["entries"] == 1  # the finished result only
    assert single.info["segments"] == 1
    speak(service, PARAGRAPH)
    calls = engine.calls
    alone = speak(service, "第二句话说的是交通！")  # a sentence made inside the paragraph
    assert alone.cache == "MISS" and engine.calls == calls  # finished from the stored segment
    assert alone.info["segments_reused"] == 1


def test_results_are_finished_to_the_loudness_target_with_a_tail(service: TTSService) -> None:
    paragraph = speak(service, PARAGRAPH)
    pcm = paragraph.audio.pcm
    tail = round(0.2 * paragraph.sample_rate)
    assert np.all(pcm[-tail:] == 0) and np.any(pcm[-tail - 200 : -tail] != 0)
    # Two phrases an engine made 20 dB apart come out equally loud.
    t = np.arange(3 * 22_050) / 22_050
    levels = []
    for amplitude, text in ((0.05, "这是一句比较轻的广播通知。"), (0.5, "这是一句比较响的广播通知。")):
        raw = (amplitude * np.sin(2 * np.pi * 300 * t) * (0.6 + 0.4 * np.sin(2 * np.pi * 3 * t))).astype(np.float32)
        service.engine.output_override = raw  # type: ignore[attr-defined]
        result = speak(service, text)
        levels.append((integrated_loudness(raw, 22_050), integrated_loudness(to_float(result.audio.pcm), 22_050)))
    assert levels[1][0] - levels[0][0] == pytest.approx(20.0, abs=0.1)
    assert levels[0][1] == pytest.approx(-16.0, abs=0.2) and levels[1][1] == pytest.approx(-16.0, abs=0.2)


def test_finishing_settings_are_in_the_key_and_reuse_the_segments(tmp_path: Path, engine: ToneEngine) -> None:
    svc = make_service(tmp_path, engine)
    first = speak(svc, PARAGRAPH)
    svc.close()
    louder = make_service(tmp_path, engine, **{"segments.loudness": -12.0})
    try:
        second = speak(louder, PARAGRAPH)
        assert second.key != first.key and second.cache == "MISS"
        assert engine.calls == 4  # every segment reused: only the assembly ran again
        assert integrated_loudness(to_float(second.audio.pcm), second.sample_rate) > integrated_loudness(
            to_float(first.audio.pcm), first.sample_rate
        )
    finally:
        louder.close()


def test_without_tail_and_loudness_a_short_text_keeps_its_old_key_and_path(tmp_path: Path, engine: ToneEngine) -> None:
    svc = make_service(tmp_path, engine, env=UNFINISHED)
    try:
        r = svc.resolve(TTSRequest(text="hello there", voice="tone-low"))
        names = [f.name for f in dataclasses.fields(KeyFields) if f.name != "finish"]
        old = KeyFields(**{name: getattr(r.fields, name) for name in names})
        assert r.fields.finish == "" and r.key == old.key
        result = speak(svc, "hello there")
        direct = engine.synthesise("hello there", engine.preset_voice("tone-low"), style="", seed=0, speed=1.0,
                                   mode="preset")  # fmt: skip
        assert np.array_equal(result.audio.pcm, np.asarray(np.clip(np.rint(direct.audio * 32767), -32767, 32767),
                                                           dtype=np.int16))  # fmt: skip
        assert svc.resolve(TTSRequest(text=PARAGRAPH, voice="tone-low")).fields.finish != ""
    finally:
        svc.close()


def test_an_entry_made_before_segments_is_reused_without_the_engine(tmp_path: Path, engine: ToneEngine) -> None:
    old = make_service(tmp_path, engine, env=UNFINISHED)
    speak(old, "hello there")
    old.close()
    new = make_service(tmp_path, engine)
    try:
        result = speak(new, "hello there")
        assert result.cache == "MISS" and engine.calls == 1 and result.info["segments_reused"] == 1
    finally:
        new.close()


def test_a_failing_sentence_keeps_the_others_and_caches_no_whole(service: TTSService, engine: ToneEngine) -> None:
    real = engine.synthesise

    def flaky(text: str, *args: Any, **kwargs: Any) -> Any:
        if text.startswith("第三"):
            raise RuntimeError("boom")
        return real(text, *args, **kwargs)

    engine.synthesise = flaky  # type: ignore[method-assign]
    with pytest.raises(EngineError):
        speak(service, PARAGRAPH)
    service.cache.flush()
    engine.synthesise = real  # type: ignore[method-assign]
    result = speak(service, PARAGRAPH)
    assert result.cache == "MISS" and result.info["segments_reused"] == 2  # the two before the failure


def test_store_false_and_bypass_write_nothing(service: TTSService, engine: ToneEngine) -> None:
    speak(service, PARAGRAPH, store=False)
    speak(service, PARAGRAPH, use_cache=False)
    service.cache.flush()
    assert service.cache.store.stats()["entries"] == 0 and len(service.cache.memory) == 0
    assert engine.calls == 8


def test_segment_metrics(service: TTSService) -> None:
    speak(service, PARAGRAPH)
    speak(service, PARAGRAPH.replace("天气", "天气预报"))
    text = service.dashboard.metrics.exposition().decode()
    assert 'tts_segments_total{result="synthesised"} 5.0' in text
    assert 'tts_segments_total{result="reused"} 3.0' in text


def test_builtin_paragraph_is_deterministic_and_levelled(tmp_path: Path) -> None:
    text = "欢迎乘坐本次列车。列车即将进站，请站在黄色安全线以内。Please mind the gap."
    a = make_service(tmp_path / "a", _builtin(), engine="builtin")
    b = make_service(tmp_path / "b", _builtin(), engine="builtin")
    try:
        first = speak(a, text, voice="zh-female")
        streamed = a.stream(TTSRequest(text=text + "谢谢。", voice="zh-female"))
        chunks = list(streamed.chunks)
        whole = streamed.result()
        other = speak(b, text, voice="zh-female")
    finally:
        a.close()
        b.close()
    assert first.info["segments"] == 3 and first.wav == other.wav  # bit-identical in another service
    assert len(chunks) == 4 and np.array_equal(np.concatenate(chunks), whole.audio.pcm)
    assert whole.info["segments_reused"] == 3  # the three sentences of the first request
    loudness = integrated_loudness(to_float(first.audio.pcm), first.sample_rate)
    assert loudness == pytest.approx(-16.0, abs=1.0)


def _builtin() -> Any:
    from lib.config import BuiltinConfig
    from lib.engines.builtin import BuiltinEngine

    return BuiltinEngine(BuiltinConfig(base="espeak"))
