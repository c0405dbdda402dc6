"""Tests of the builtin engine on real prompt recordings (``../shared/testdata/voices``).

Prompt PCM is prepared as the service does: decoded with soundfile, mixed to mono,
resampled to 16 kHz with ``resample_poly`` and converted to int16. F0 is measured with
WORLD's DIO + StoneMask at 5 ms frames on the full-band signal (the engine analyses at
10 ms on a decimated one).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from math import gcd
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
from scipy.signal import resample_poly

from lib.config import BuiltinConfig
from lib.engines.base import MODES, PROMPT_SAMPLE_RATE, Engine, VoiceProfile
from lib.engines.builtin import BuiltinEngine, _world
from lib.errors import NotFoundError, PromptAudioError, ValidationError

REPO = Path(__file__).resolve().parents[1]
SENTENCE_ZH = "请到三号窗口办理业务，谢谢你的耐心配合。"


def _testdata_dir() -> Path:
    override = os.environ.get("TTS_TESTDATA_DIR")
    return Path(override) if override else REPO.parent / "shared" / "testdata" / "voices"


def prompt_pcm(path: Path) -> np.ndarray:
    """Decode, mix to mono, resample to 16 kHz, int16 -- the service's canonical prompt."""
    audio, rate = sf.read(str(path), dtype="float64", always_2d=True)
    mono = audio.mean(axis=1)
    g = gcd(int(rate), PROMPT_SAMPLE_RATE)
    resampled = resample_poly(mono, PROMPT_SAMPLE_RATE // g, int(rate) // g)
    return np.clip(np.round(resampled * 32767.0), -32768, 32767).astype(np.int16)


def median_f0(audio: np.ndarray, rate: int) -> float:
    f0, _ = _world.f0_track(audio.astype(np.float64), rate, 5.0)
    return float(np.median(f0[f0 > 0]))


def rms(audio: np.ndarray) -> float:
    return float(np.sqrt(np.mean(audio.astype(np.float64) ** 2)))


def voiced_seconds(audio: np.ndarray, rate: int) -> float:
    """Length from the first to the last non-silent sample (a rate measure)."""
    loud = np.flatnonzero(np.abs(audio) > 0.02)
    return float(loud[-1] - loud[0]) / rate if loud.size else 0.0


def digest(audio: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(audio).tobytes()).hexdigest()


@pytest.fixture(scope="module")
def voices_dir() -> Path:
    path = _testdata_dir()
    if not (path / "zh_female_prompt.wav").is_file() or not (path / "male_prompt.wav").is_file():
        pytest.skip(f"prompt recordings not found in {path}; set TTS_TESTDATA_DIR to the voices folder")
    return path


@pytest.fixture(scope="module")
def engine(espeak_engine: BuiltinEngine) -> BuiltinEngine:
    return espeak_engine


@pytest.fixture(scope="module")
def female(engine: BuiltinEngine, voices_dir: Path) -> VoiceProfile:
    return engine.extract_voice(prompt_pcm(voices_dir / "zh_female_prompt.wav"), "希望你以后能够做的比我还好呦。")


@pytest.fixture(scope="module")
def male(engine: BuiltinEngine, voices_dir: Path) -> VoiceProfile:
    return engine.extract_voice(prompt_pcm(voices_dir / "male_prompt.wav"), "")


def say(engine: BuiltinEngine, text: str, voice: VoiceProfile, style: str = "", seed: int = 0) -> np.ndarray:
    result = engine.synthesise(text, voice, style=style, seed=seed, speed=1.0, mode="instruct")
    return result.audio


def test_engine_protocol(engine: BuiltinEngine) -> None:
    assert isinstance(engine, Engine)
    assert engine.name == "builtin"
    assert engine.sample_rate == 22_050
    assert engine.modes == frozenset(MODES) == engine.style_modes
    assert "espeak-1.52" in engine.model_version
    assert {"zh-female", "zh-male", "en-female", "en-male", "yue-female"} <= set(engine.presets())


def test_unknown_preset_raises(engine: BuiltinEngine) -> None:
    with pytest.raises(NotFoundError):
        engine.preset_voice("nobody")


@pytest.mark.parametrize(
    ("preset", "text", "units"),
    [
        ("zh-female", SENTENCE_ZH, 18),
        ("zh-male", SENTENCE_ZH, 18),
        ("yue-female", "佢哋今日喺度食咗飯，好開心。", 14),
        ("en-female", "Please go to window three, thank you for waiting.", 9),
        ("en-male", "Please go to window three, thank you for waiting.", 9),
        ("zh-female", "请到3号窗口办理 VIP 业务", 11),
    ],
)
def test_every_language_speaks_with_plausible_duration(
    engine: BuiltinEngine, preset: str, text: str, units: int
) -> None:
    result = engine.synthesise(text, engine.preset_voice(preset), style="", seed=0, speed=1.0, mode="preset")
    audio = result.audio
    assert audio.dtype == np.float32 and audio.ndim == 1
    assert np.all(np.isfinite(audio)) and 0.1 < float(np.max(np.abs(audio))) <= 1.0
    per_unit = len(audio) / engine.sample_rate / units  # characters or words
    assert 0.1 <= per_unit <= 0.6, per_unit


def test_mixed_text_uses_both_languages(engine: BuiltinEngine) -> None:
    result = engine.synthesise(
        "请到3号窗口办理 VIP 业务", engine.preset_voice("zh-female"), style="", seed=0, speed=1.0, mode="preset"
    )
    assert result.info["languages"] == ["cmn", "en-us"]


def test_pitch_moves_toward_prompt(engine: BuiltinEngine, female: VoiceProfile, male: VoiceProfile) -> None:
    assert female.kind == male.kind == "prompt"
    high = median_f0(say(engine, SENTENCE_ZH, female), engine.sample_rate)
    low = median_f0(say(engine, SENTENCE_ZH, male), engine.sample_rate)
    assert high > low * 1.4
    # Within a semitone and a half of each prompt's own median.
    for out, profile in ((high, female), (low, male)):
        assert abs(12 * np.log2(out / float(profile.params["f0_median_hz"]))) < 1.5


def test_profile_round_trips_compactly(engine: BuiltinEngine, male: VoiceProfile) -> None:
    """A prompt profile carries its frame pool as a compact blob (no pickle): the stored
    bytes decode to an equal profile that speaks bit-identically."""
    data = male.to_bytes()
    # 13.75 s prompt: 93 bytes per audible 5 ms frame, far below 1 MB.
    assert 50_000 < len(male.blob) < 400_000
    assert male.params["pool"]["frames"] * 93 == len(male.blob)
    restored = VoiceProfile.from_bytes(data)
    assert restored == male
    assert digest(say(engine, SENTENCE_ZH, restored)) == digest(say(engine, SENTENCE_ZH, male))


@pytest.mark.parametrize(
    ("style", "measure", "direction"),
    [
        ("slow", "duration", +1), ("慢", "duration", +1),
        ("fast", "duration", -1), ("快", "duration", -1),
        ("loud", "rms", +1), ("大声", "rms", +1),
        ("soft", "rms", -1), ("轻声", "rms", -1),
        ("happy", "f0", +1), ("开心", "f0", +1),
        ("sad", "f0", -1), ("悲伤", "f0", -1),
        ("calm", "duration", +1), ("平静", "duration", +1),
        ("excited", "f0", +1), ("激动", "f0", +1),
        ("pitch up", "f0", +1), ("高音", "f0", +1), ("higher", "f0", +1),
        ("pitch down", "f0", -1), ("低音", "f0", -1), ("lower", "f0", -1),
    ],
)  # fmt: skip
@pytest.mark.parametrize("voice_name", ["prompt", "preset"])
def test_style_words_change_prosody(
    engine: BuiltinEngine, female: VoiceProfile, style: str, measure: str, direction: int, voice_name: str
) -> None:
    voice = female if voice_name == "prompt" else engine.preset_voice("zh-male")
    base = say(engine, SENTENCE_ZH, voice)
    styled = say(engine, SENTENCE_ZH, voice, style=style)
    rate = engine.sample_rate
    if measure == "duration":
        ratio = voiced_seconds(styled, rate) / voiced_seconds(base, rate)
    elif measure == "rms":
        ratio = rms(styled) / rms(base)
    else:
        ratio = median_f0(styled, rate) / median_f0(base, rate)
    assert (ratio - 1.0) * direction > 0.05, ratio
    assert float(np.max(np.abs(styled))) <= 1.0


def test_combined_styles(engine: BuiltinEngine, female: VoiceProfile) -> None:
    for style in ("slow and happy", "慢一点，开心"):
        result = engine.synthesise(SENTENCE_ZH, female, style=style, seed=0, speed=1.0, mode="instruct")
        assert result.info["style_words"] == ["slow", "happy"]
        assert result.info["ignored_style_words"] == []
    base = say(engine, SENTENCE_ZH, female)
    both = say(engine, SENTENCE_ZH, female, style="slow and happy")
    rate = engine.sample_rate
    assert voiced_seconds(both, rate) > voiced_seconds(base, rate) * 1.1
    assert median_f0(both, rate) > median_f0(base, rate) * 1.05


def test_unknown_style_words_are_reported(engine: BuiltinEngine) -> None:
    voice = engine.preset_voice("en-female")
    result = engine.synthesise("Hello there.", voice, style="happy and boisterous", seed=0, speed=1.0, mode="instruct")
    assert result.info["ignored_style_words"] == ["boisterous"]
    result = engine.synthesise("你好。", voice, style="用四川话说，开心一点", seed=0, speed=1.0, mode="instruct")
    assert result.info["ignored_style_words"] == ["四川话"]


def test_endofprompt_is_stripped(engine: BuiltinEngine) -> None:
    voice = engine.preset_voice("zh-female")
    plain = engine.synthesise("你好。", voice, style="开心", seed=3, speed=1.0, mode="instruct")
    tagged = engine.synthesise("你好。", voice, style="开心<|endofprompt|>", seed=3, speed=1.0, mode="instruct")
    assert tagged.info["ignored_style_words"] == []
    assert digest(plain.audio) == digest(tagged.audio)


@pytest.mark.slow
def test_repeatable_within_process(engine: BuiltinEngine, female: VoiceProfile) -> None:
    text = "请到3号窗口办理 VIP 业务。Thank you!"
    digests = {digest(say(engine, text, female, style="happy", seed=7)) for _ in range(20)}
    assert len(digests) == 1


_CHILD = """
import hashlib, sys
import numpy as np
sys.path.insert(0, {repo!r})
from tests.test_builtin_engine import prompt_pcm, say, SENTENCE_ZH
from lib.config import BuiltinConfig
from lib.engines.builtin import BuiltinEngine
from pathlib import Path
engine = BuiltinEngine(BuiltinConfig(base="espeak"))
voice = engine.extract_voice(prompt_pcm(Path({prompt!r})), "")
print(hashlib.sha256(say(engine, SENTENCE_ZH + " VIP.", voice, style="sad", seed=11).tobytes()).hexdigest())
print(hashlib.sha256(voice.to_bytes()).hexdigest())
"""


@pytest.mark.slow
def test_bit_identical_across_processes(engine: BuiltinEngine, voices_dir: Path) -> None:
    prompt = voices_dir / "zh_female_prompt.wav"
    code = _CHILD.format(repo=str(REPO), prompt=str(prompt))
    outputs = [
        subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO).stdout
        for _ in range(2)
    ]
    voice = engine.extract_voice(prompt_pcm(prompt), "")
    here = digest(say(engine, SENTENCE_ZH + " VIP.", voice, style="sad", seed=11))
    here_voice = hashlib.sha256(voice.to_bytes()).hexdigest()
    assert outputs[0] == outputs[1] == f"{here}\n{here_voice}\n"


def test_seed_changes_output(engine: BuiltinEngine, female: VoiceProfile) -> None:
    a, b = say(engine, SENTENCE_ZH, female, seed=1), say(engine, SENTENCE_ZH, female, seed=2)
    assert digest(a) != digest(b)
    preset = engine.preset_voice("en-male")
    assert digest(say(engine, "Hello there.", preset, seed=1)) != digest(say(engine, "Hello there.", preset, seed=2))


def test_stream_equals_synthesise(engine: BuiltinEngine, male: VoiceProfile) -> None:
    text = "第一句话在这里。Second sentence here! 第三句，结束。"
    whole = engine.synthesise(text, male, style="fast", seed=5, speed=1.1, mode="cross_lingual").audio
    chunks = list(engine.stream(text, male, style="fast", seed=5, speed=1.1, mode="cross_lingual"))
    assert len(chunks) > 1
    assert digest(np.concatenate(chunks)) == digest(whole)


def test_speed_changes_duration(engine: BuiltinEngine) -> None:
    voice = engine.preset_voice("zh-female")
    rate = engine.sample_rate
    slow = engine.synthesise(SENTENCE_ZH, voice, style="", seed=0, speed=0.4, mode="preset").audio
    normal = engine.synthesise(SENTENCE_ZH, voice, style="", seed=0, speed=1.0, mode="preset").audio
    assert voiced_seconds(slow, rate) > voiced_seconds(normal, rate) * 2.0


@pytest.mark.parametrize("voice_kind", ["preset", "prompt"])
def test_openai_speed_range_scales_duration_four_times_each_way(
    engine: BuiltinEngine, male: VoiceProfile, voice_kind: str
) -> None:
    """0.25 and 4.0 (OpenAI's range) reach beyond espeak's 80-450 words a minute: WORLD
    stretches the rest, so the speech really lasts about 4x and 1/4 as long."""
    voice = engine.preset_voice("en-male") if voice_kind == "preset" else male
    mode = "preset" if voice_kind == "preset" else "cross_lingual"
    text = "Please have your ticket ready, the train to the airport leaves in five minutes."
    seconds = {
        speed: engine.synthesise(text, voice, style="", seed=0, speed=speed, mode=mode).audio.size / engine.sample_rate
        for speed in (0.25, 1.0, 4.0)
    }
    assert 3.4 <= seconds[0.25] / seconds[1.0] <= 4.6, seconds
    assert 3.4 <= seconds[1.0] / seconds[4.0] <= 4.6, seconds


def test_punctuation_only_is_a_clear_client_error(engine: BuiltinEngine) -> None:
    for text in ("。", "...", "😀", "١٢٣"):
        with pytest.raises(ValidationError, match="nothing the builtin engine can speak"):
            engine.synthesise(text, engine.preset_voice("zh-female"), style="", seed=0, speed=1.0, mode="preset")


def test_short_text_is_not_empty(engine: BuiltinEngine) -> None:
    voice = engine.preset_voice("zh-female")
    audio = engine.synthesise("好。", voice, style="", seed=0, speed=1.0, mode="preset").audio
    assert audio.size > 0 and np.all(np.isfinite(audio))


def test_silent_prompt_rejected(engine: BuiltinEngine) -> None:
    with pytest.raises(PromptAudioError, match="silent"):
        engine.extract_voice(np.zeros(3 * PROMPT_SAMPLE_RATE, dtype=np.int16), "")


def test_sine_prompt_rejected(engine: BuiltinEngine) -> None:
    t = np.arange(3 * PROMPT_SAMPLE_RATE) / PROMPT_SAMPLE_RATE
    sine = (0.5 * 32767 * np.sin(2 * np.pi * 1000.0 * t)).astype(np.int16)
    with pytest.raises(PromptAudioError, match="tone"):
        engine.extract_voice(sine, "")


def test_noise_prompt_rejected(engine: BuiltinEngine) -> None:
    noise = np.random.default_rng(0).normal(0, 3000, 3 * PROMPT_SAMPLE_RATE).astype(np.int16)
    with pytest.raises(PromptAudioError):
        engine.extract_voice(noise, "")


def test_forced_language() -> None:
    engine = BuiltinEngine(BuiltinConfig(language="yue", base="espeak"))
    try:
        result = engine.synthesise(
            "你好 world", engine.preset_voice("zh-female"), style="", seed=0, speed=1.0, mode="preset"
        )
        assert result.info["languages"] == ["en-us", "yue"]
        assert "lang-yue" in engine.model_version
    finally:
        engine.close()
