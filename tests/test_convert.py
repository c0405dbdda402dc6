"""Convert mode (speech to speech) through the cache: keyed on the source recording,
the target voice, seed, speed and the engine; single-flight; the HTTP endpoint
``POST /api/convert``. The tone engine converts deterministically; real recordings."""

from __future__ import annotations

import io
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from conftest import in_process

from lib.api import create_app
from lib.config import load_config
from lib.engines.tone import ToneEngine
from lib.errors import PromptAudioError, ValidationError
from lib.pipeline.service import TTSService
from lib.request.access import LOCAL
from lib.request.types import ConvertRequest


@pytest.fixture
def engine() -> ToneEngine:
    return ToneEngine()


@pytest.fixture
def service(tmp_path: Path, engine: ToneEngine) -> Iterator[TTSService]:
    svc = TTSService(load_config(env={}, overrides={"engine": "tone", "cache.dir": str(tmp_path / "c")}), engine)
    yield svc
    svc.close()


def test_miss_then_hit_with_identical_audio(service: TTSService, engine: ToneEngine, testdata_dir: Path) -> None:
    source = testdata_dir / "male_prompt.wav"
    first = service.convert(ConvertRequest(source_audio=str(source), voice="tone-high"))
    second = service.convert(ConvertRequest(source_audio=source.read_bytes(), voice="tone-high", format="mp3"))
    assert (first.cache, second.cache) == ("MISS", "HIT")
    assert first.key == second.key and first.wav == second.wav
    assert engine.calls == 1
    assert first.audio.meta["mode"] == "convert" and "text" not in first.audio.meta


def test_the_key_follows_source_voice_seed_and_speed(service: TTSService, testdata_dir: Path) -> None:
    male, female = str(testdata_dir / "male_prompt.wav"), str(testdata_dir / "zh_female_prompt.wav")
    base = service.resolve(ConvertRequest(source_audio=male, voice="tone-high")).key
    variants = [
        ConvertRequest(source_audio=female, voice="tone-high"),
        ConvertRequest(source_audio=male, voice="tone-low"),
        ConvertRequest(source_audio=male, prompt_audio=female),
        ConvertRequest(source_audio=male, voice="tone-high", seed=1),
        ConvertRequest(source_audio=male, voice="tone-high", speed=1.5),
    ]
    keys = {service.resolve(v).key for v in variants}
    assert len(keys) == len(variants) and base not in keys


def test_a_saved_voice_is_the_same_target_as_its_recording(service: TTSService, testdata_dir: Path) -> None:
    female = testdata_dir / "zh_female_prompt.wav"
    service.voices.save("desk", str(female), caller=LOCAL)
    source = str(testdata_dir / "male_prompt.wav")
    by_name = service.resolve(ConvertRequest(source_audio=source, voice="desk")).key
    by_upload = service.resolve(ConvertRequest(source_audio=source, prompt_audio=str(female))).key
    assert by_name == by_upload


def test_concurrent_identical_conversions_run_the_engine_once(tmp_path: Path, testdata_dir: Path) -> None:
    engine = ToneEngine(delay=0.3)
    svc = TTSService(load_config(env={}, overrides={"engine": "tone", "cache.dir": str(tmp_path / "c")}), engine)
    source = (testdata_dir / "male_prompt.wav").read_bytes()
    results: list[str] = []
    try:
        threads = [
            threading.Thread(target=lambda: results.append(
                svc.convert(ConvertRequest(source_audio=source, voice="tone-low")).cache
            ))
            for _ in range(8)
        ]  # fmt: skip
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert engine.calls == 1 and sorted(results) == ["HIT"] * 7 + ["MISS"]
    finally:
        svc.close()


def test_bad_sources_are_refused_and_nothing_is_cached(
    service: TTSService, engine: ToneEngine, testdata_dir: Path
) -> None:
    silence = io.BytesIO()
    sf.write(silence, np.zeros(32000, dtype=np.int16), 16000, format="WAV")
    with pytest.raises(PromptAudioError, match="source_audio is silent"):
        service.convert(ConvertRequest(source_audio=silence.getvalue(), voice="tone-low"))
    with pytest.raises(ValidationError, match="no voice"):
        service.convert(ConvertRequest(source_audio=str(testdata_dir / "male_prompt.wav")))
    assert engine.calls == 0 and service.cache.store.stats()["entries"] == 0


class _NoConvert(ToneEngine):
    convert = None  # type: ignore[assignment]


class _ModelCannotConvert(ToneEngine):
    converts = False  # e.g. CosyVoice code without inference_vc


@pytest.mark.parametrize("engine_class", [_NoConvert, _ModelCannotConvert])
def test_an_engine_that_cannot_convert_says_so(tmp_path: Path, testdata_dir: Path, engine_class: type) -> None:
    engine = engine_class()
    svc = TTSService(load_config(env={}, overrides={"engine": "tone", "cache.dir": str(tmp_path / "c")}), engine)
    try:
        with pytest.raises(ValidationError, match="cannot convert"):
            svc.convert(ConvertRequest(source_audio=str(testdata_dir / "male_prompt.wav"), voice="tone-low"))
        assert engine.calls == 0
    finally:
        svc.close()


def test_http_convert(service: TTSService, testdata_dir: Path) -> None:
    source = (testdata_dir / "male_prompt.wav").read_bytes()
    with in_process(create_app(service)) as client:
        files = {"source_audio": ("s.wav", source, "audio/wav")}
        first = client.post("/api/convert", files=files, data={"voice": "tone-low"})
        second = client.post(
            "/api/convert", files=files, data={"voice": "tone-low", "format": "flac"},
            headers={"Accept": "application/json"},
        )  # fmt: skip
        assert first.status_code == 200, first.text
        assert first.headers["x-cache"] == "MISS" and first.headers["content-type"] == "audio/wav"
        assert first.headers["cache-control"] == "public, max-age=31536000, immutable"  # as /api/tts
        private = client.post("/api/convert", files=files, data={"voice": "tone-low", "seed": "5", "ttl": "600"})
        assert private.headers["cache-control"].startswith("private, max-age=")
        bypass = client.post("/api/convert", files=files, data={"voice": "tone-low", "cache": "false"})
        assert bypass.headers["x-cache"] == "BYPASS" and bypass.headers["cache-control"] == "no-store"
        doc = second.json()
        assert doc["cache"] == "HIT" and doc["key"] == first.headers["x-cache-key"]
        stored = client.get(doc["url"])
        assert stored.status_code == 200 and stored.content[:4] == b"fLaC"
        missing = client.post("/api/convert", data={"voice": "tone-low"})
        assert missing.status_code == 400 and "source_audio" in missing.json()["error"]
        unknown = client.post("/api/convert", files=files, data={"voice": "nobody"})
        assert unknown.status_code == 404
        # The decoder's refusals name the field they are about: the source, not a prompt.
        garbage = {"source_audio": ("s.wav", b"RIFF not really audio" * 20, "audio/wav")}
        unreadable = client.post("/api/convert", files=garbage, data={"voice": "tone-low"})
        assert unreadable.status_code == 415
        assert unreadable.json()["error"].startswith("source_audio") and "prompt audio" not in unreadable.text
