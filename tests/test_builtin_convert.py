"""Convert mode of the builtin engine (speech to speech) on the real prompt recordings.

No speaker-embedding model here: the tests check the mechanism -- the output follows
the source's timing (scaled by speed), its pitch moves to the target voice, it is
bit-identical for the same request in any process, and unusable sources are refused.
"""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from lib.engines.base import PROMPT_SAMPLE_RATE, VoiceConverter, VoiceProfile
from lib.engines.builtin import BuiltinEngine
from lib.errors import PromptAudioError, ValidationError
from tests.test_builtin_engine import REPO, _testdata_dir, median_f0, prompt_pcm

SOURCE_SECONDS = 4


@pytest.fixture(scope="module")
def engine(espeak_engine: BuiltinEngine) -> BuiltinEngine:
    return espeak_engine


@pytest.fixture(scope="module")
def paths() -> dict[str, Path]:
    path = _testdata_dir()
    files = {"female": path / "zh_female_prompt.wav", "male": path / "male_prompt.wav"}
    if not all(p.is_file() for p in files.values()):
        pytest.skip(f"prompt recordings not found in {path}; set TTS_TESTDATA_DIR to the voices folder")
    return files


@pytest.fixture(scope="module")
def voices(engine: BuiltinEngine, paths: dict[str, Path]) -> dict[str, VoiceProfile]:
    return {name: engine.extract_voice(prompt_pcm(p), "") for name, p in paths.items()}


@pytest.fixture(scope="module")
def male_source(paths: dict[str, Path]) -> np.ndarray:
    return prompt_pcm(paths["male"])[: SOURCE_SECONDS * PROMPT_SAMPLE_RATE]


def digest(audio: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(audio).tobytes()).hexdigest()


def test_engine_is_a_converter(engine: BuiltinEngine) -> None:
    assert isinstance(engine, VoiceConverter)


def test_pitch_moves_to_the_target_voice(
    engine: BuiltinEngine, voices: dict[str, VoiceProfile], male_source: np.ndarray
) -> None:
    rate = engine.sample_rate
    source_hz = median_f0(male_source.astype(np.float64) / 32768.0, PROMPT_SAMPLE_RATE)
    target_hz = float(voices["female"].params["f0_median_hz"])
    out = engine.convert(male_source, voices["female"], seed=0, speed=1.0)
    out_hz = median_f0(out.audio, rate)
    # The male source (about 140 Hz) comes out near the female voice (about 270 Hz).
    assert abs(12 * np.log2(out_hz / target_hz)) < 2.0, (source_hz, out_hz, target_hz)
    assert out_hz > source_hz * 1.5
    assert out.audio.dtype == np.float32 and float(np.max(np.abs(out.audio))) <= 1.0


def test_duration_follows_speed(
    engine: BuiltinEngine, voices: dict[str, VoiceProfile], male_source: np.ndarray
) -> None:
    rate = engine.sample_rate
    for speed in (0.5, 1.0, 2.0):
        audio = engine.convert(male_source, voices["female"], seed=0, speed=speed).audio
        assert audio.size / rate == pytest.approx(SOURCE_SECONDS / speed, rel=0.03), speed


def test_convert_into_a_preset_voice(engine: BuiltinEngine, male_source: np.ndarray) -> None:
    """A preset has a pool too (espeak's own frames, pitch and all): each output sits at
    its preset's pitch, and the same request repeats exactly."""
    outputs = {}
    for name in ("zh-female", "zh-male"):
        preset = engine.preset_voice(name)
        a = engine.convert(male_source, preset, seed=3, speed=1.0)
        assert digest(a.audio) == digest(engine.convert(male_source, preset, seed=3, speed=1.0).audio)
        pool_hz = float(np.exp(engine._preset_pool(str(preset.params["base"])).log_f0_mean))
        outputs[name] = median_f0(a.audio, engine.sample_rate)
        assert abs(12 * np.log2(outputs[name] / pool_hz)) < 2.0, (name, outputs[name], pool_hz)
    assert outputs["zh-female"] > outputs["zh-male"] * 1.3


def test_seed_and_voice_change_the_output(
    engine: BuiltinEngine, voices: dict[str, VoiceProfile], male_source: np.ndarray
) -> None:
    base = engine.convert(male_source, voices["female"], seed=1, speed=1.0).audio
    assert digest(base) == digest(engine.convert(male_source, voices["female"], seed=1, speed=1.0).audio)
    assert digest(base) != digest(engine.convert(male_source, voices["female"], seed=2, speed=1.0).audio)
    assert digest(base) != digest(engine.convert(male_source, voices["male"], seed=1, speed=1.0).audio)


_CHILD = """
import hashlib, sys
sys.path.insert(0, {repo!r})
from pathlib import Path
from tests.test_builtin_engine import prompt_pcm
from lib.config import BuiltinConfig
from lib.engines.builtin import BuiltinEngine
engine = BuiltinEngine(BuiltinConfig(base="espeak"))
voice = engine.extract_voice(prompt_pcm(Path({target!r})), "")
source = prompt_pcm(Path({source!r}))[: {samples}]
print(hashlib.sha256(engine.convert(source, voice, seed=5, speed=1.25).audio.tobytes()).hexdigest())
"""


def test_bit_identical_across_processes(
    engine: BuiltinEngine, paths: dict[str, Path], voices: dict[str, VoiceProfile], male_source: np.ndarray
) -> None:
    code = _CHILD.format(repo=str(REPO), target=str(paths["female"]), source=str(paths["male"]),
                         samples=male_source.size)  # fmt: skip
    child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    here = digest(engine.convert(male_source, voices["female"], seed=5, speed=1.25).audio)
    assert child.stdout.strip() == here


def test_unusable_sources_are_refused(engine: BuiltinEngine, voices: dict[str, VoiceProfile]) -> None:
    voice = voices["female"]
    with pytest.raises(PromptAudioError, match="source audio is silent"):
        engine.convert(np.zeros(3 * PROMPT_SAMPLE_RATE, dtype=np.int16), voice, seed=0, speed=1.0)
    t = np.arange(3 * PROMPT_SAMPLE_RATE) / PROMPT_SAMPLE_RATE
    sine = (0.5 * 32767 * np.sin(2 * np.pi * 1000.0 * t)).astype(np.int16)
    with pytest.raises(PromptAudioError, match="steady tone"):
        engine.convert(sine, voice, seed=0, speed=1.0)
    with pytest.raises(PromptAudioError, match="too short"):
        engine.convert(np.ones(1000, dtype=np.int16), voice, seed=0, speed=1.0)


def test_bad_arguments_are_client_errors(
    engine: BuiltinEngine, voices: dict[str, VoiceProfile], male_source: np.ndarray
) -> None:
    with pytest.raises(ValidationError, match="int16"):
        engine.convert(male_source.astype(np.float32), voices["female"], seed=0, speed=1.0)
    with pytest.raises(ValidationError, match="speed"):
        engine.convert(male_source, voices["female"], seed=0, speed=0.0)
    foreign = VoiceProfile("tone", "1", "prompt", {}, b"")
    with pytest.raises(ValidationError, match="engine"):
        engine.convert(male_source, foreign, seed=0, speed=1.0)
