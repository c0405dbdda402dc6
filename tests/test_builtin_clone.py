"""The builtin engine's frame transfer: clones are made of the prompt's own frames.

Mechanism tests without a speaker-embedding model: the cepstral frames of a clone must
lie near the prompt's frame pool (much nearer than raw espeak's, and nearer to its own
prompt than to another one), and the stored pool must decode exactly and reject damage.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy.spatial import cKDTree

from lib.engines.base import VoiceProfile
from lib.engines.builtin import BuiltinEngine, _world
from lib.engines.builtin.espeak import EspeakParams
from lib.engines.builtin.features import envelope_to_cepstra
from lib.engines.builtin.pool import FramePool
from lib.errors import ValidationError
from tests.test_builtin_engine import SENTENCE_ZH, _testdata_dir, prompt_pcm

ENGLISH = "Please take a number and wait for your turn."


@pytest.fixture(scope="module")
def engine(espeak_engine: BuiltinEngine) -> BuiltinEngine:
    return espeak_engine


@pytest.fixture(scope="module")
def voices(engine: BuiltinEngine) -> dict[str, VoiceProfile]:
    path = _testdata_dir()
    files = {"female": path / "zh_female_prompt.wav", "male": path / "male_prompt.wav"}
    if not all(p.is_file() for p in files.values()):
        pytest.skip(f"prompt recordings not found in {path}; set TTS_TESTDATA_DIR to the voices folder")
    return {name: engine.extract_voice(prompt_pcm(p), "") for name, p in files.items()}


def voiced_cepstra(audio: np.ndarray, rate: int) -> np.ndarray:
    x = np.asarray(audio, dtype=np.float64)
    f0, times = _world.f0_track(x, rate, 5.0)
    sp = _world.envelope(x, rate, f0[f0 > 0], times[f0 > 0])
    return envelope_to_cepstra(sp, rate)


def distance_to_pool(audio: np.ndarray, rate: int, pool: FramePool) -> float:
    """Median distance (cepstra 1-39) from the audio's voiced frames to the nearest
    voiced pool frame: small when the audio is made of the pool's frames."""
    frames = voiced_cepstra(audio, rate)[:, 1:]
    d, _ = cKDTree(pool.cepstra[pool.voiced, 1:]).query(frames, k=1)
    return float(np.median(d))


def test_clone_frames_come_from_the_prompt(engine: BuiltinEngine, voices: dict[str, VoiceProfile]) -> None:
    rate = engine.sample_rate
    for name, other in (("female", "male"), ("male", "female")):
        voice = voices[name]
        pool = FramePool.from_stored(dict(voice.params["pool"]), voice.blob)
        clone = engine.synthesise(ENGLISH, voice, style="", seed=0, speed=1.0, mode="cross_lingual").audio
        base = str(voice.params["base"])
        raw = engine._espeak.synth(ENGLISH, EspeakParams(f"en-us+{base}")).astype(np.float64) / 32768.0
        other_clone = engine.synthesise(ENGLISH, voices[other], style="", seed=0, speed=1.0, mode="cross_lingual").audio
        own = distance_to_pool(clone, rate, pool)
        # Nearer the prompt's frames than espeak itself, and than a clone of the other voice.
        assert own < 0.8 * distance_to_pool(raw, rate, pool), name
        assert own < distance_to_pool(other_clone, rate, pool), name


def test_pool_round_trip_and_damage(voices: dict[str, VoiceProfile]) -> None:
    voice = voices["female"]
    params = dict(voice.params["pool"])
    pool = FramePool.from_stored(params, voice.blob)
    assert pool.cepstra.shape == (params["frames"], 40)
    assert pool.voiced.dtype == bool and pool.voiced.any() and (~pool.voiced).any()
    assert pool.to_blob() == voice.blob
    with pytest.raises(ValueError, match="size"):
        FramePool.from_stored(params, voice.blob[:-1])
    with pytest.raises(ValueError, match="format"):
        FramePool.from_stored({**params, "format": 99}, voice.blob)


def test_profile_without_pool_is_refused(engine: BuiltinEngine, voices: dict[str, VoiceProfile]) -> None:
    voice = voices["female"]
    params = {k: v for k, v in voice.params.items() if k != "pool"}
    stale = VoiceProfile(voice.engine, voice.model_version, "prompt", params, b"")
    with pytest.raises(ValidationError, match="extract the voice again"):
        engine.synthesise(SENTENCE_ZH, stale, style="", seed=0, speed=1.0, mode="cross_lingual")
    damaged = VoiceProfile(voice.engine, voice.model_version, "prompt", dict(voice.params), voice.blob[:100])
    with pytest.raises(ValidationError, match="frame pool"):
        engine.synthesise(SENTENCE_ZH, damaged, style="", seed=0, speed=1.0, mode="cross_lingual")


def test_model_version_names_the_frame_transfer(engine: BuiltinEngine) -> None:
    # builtin-2 profiles (formant scale + equaliser, no pool) must never be served as builtin-3.
    assert engine.model_version.startswith("builtin-4+")
    assert "world-0.3.6" in engine.model_version


def test_extraction_is_repeatable(engine: BuiltinEngine, voices: dict[str, VoiceProfile]) -> None:
    """The same prompt gives the same profile, pool bytes included (cache keys rely on it)."""
    path = Path(_testdata_dir()) / "zh_female_prompt.wav"
    again = engine.extract_voice(prompt_pcm(path), "")
    assert again == voices["female"]


def _voiced_frames(x: np.ndarray, rate: int) -> tuple[np.ndarray, np.ndarray]:
    """Cepstra 1-39 of every frame and which frames are voiced (5 ms frames from 0)."""
    f0, times = _world.f0_track(x, rate, 5.0, speed=1)
    return envelope_to_cepstra(_world.envelope(x, rate, f0, times), rate)[:, 1:], f0 > 0


def test_kokoro_envelope_keeps_the_source_frames_moved_to_the_voice(voices: dict[str, VoiceProfile]) -> None:
    """``matched=0``, the pure shift (the Kokoro base ships 0.5, issue 33): each voiced frame is
    the source's own moved by the class-mean difference, so the output's voiced mean is the
    voice's while its frame-to-frame detail (the vowels) stays the source's; the kNN
    (``matched=1``) loses that detail."""
    from lib.engines.builtin.convert import Prosody, transfer

    rate = 16_000
    female = voices["female"]
    pool = FramePool.from_stored(dict(female.params["pool"]), female.blob)
    source = prompt_pcm(_testdata_dir() / "male_prompt.wav")[: 4 * rate].astype(np.float64) / 32768.0
    src, src_voiced = _voiced_frames(source, rate)
    pool_mean = pool.cepstra[pool.voiced, 1:].mean(axis=0)

    def detail_and_mean(matched: float) -> tuple[float, float]:
        out = transfer(source, rate, pool, Prosody(), dio_speed=1, unvoiced=False, matched=matched)
        cep, voiced = _voiced_frames(out, rate)
        n = min(len(cep), len(src))
        both = voiced[:n] & src_voiced[:n]
        a, b = cep[:n][both], src[:n][both]
        a, b = a - a.mean(axis=0), b - b.mean(axis=0)
        detail = float((a * b).sum() / np.sqrt((a * a).sum() * (b * b).sum()))
        return detail, float(np.linalg.norm(cep[voiced].mean(axis=0) - pool_mean))

    src_to_voice = float(np.linalg.norm(src[src_voiced].mean(axis=0) - pool_mean))
    shift_detail, shift_mean = detail_and_mean(0.0)
    knn_detail, _ = detail_and_mean(1.0)
    assert shift_mean < 0.7 * src_to_voice, (shift_mean, src_to_voice)
    assert shift_detail > 0.9 and shift_detail > knn_detail + 0.08, (shift_detail, knn_detail)
