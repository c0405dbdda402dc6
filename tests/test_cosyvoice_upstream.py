"""CosyVoice2 and CosyVoice3 through the real upstream code, on tiny random-weight models.

The upstream source is ``../shared/upstream/CosyVoice`` beside the repository (or
``$TTS_COSYVOICE_UPSTREAM``); the models are built per session by
``tests/cosyvoice2_fixture.py`` in the published layouts. The tests skip with a reason when
the source or the CosyVoice stack is absent, except in CI, where that is a failure.

Everything is asserted bit for bit (``np.array_equal``), and the mechanisms are checked, not
only the outcome: what the LLM was given, how often the prompt frontend ran, which random
stream a draw came from, what the normaliser did to the text.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cosyvoice_code import ROOT, stack_missing, upstream_dir, upstream_missing, use_upstream

from lib.audio.pcm import float_to_int16
from lib.config import CosyVoiceConfig, load_config
from lib.engines.base import VoiceConverter, VoiceProfile
from lib.errors import PromptAudioError
from lib.request.access import LOCAL
from lib.request.types import TTSRequest

pytestmark = [
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

_MISSING = None if os.environ.get("CI") else (stack_missing() or upstream_missing())
needs_upstream = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")

FAMILIES = ("v2", "v3")
MODES = ("zero_shot", "cross_lingual", "instruct", "preset")
CROSS_PROCESS_MODES = ("zero_shot", "instruct")
"""Modes tried in a second process: a prompt with its words and one with a style (every
mode's determinism within a process is tried per mode; a process costs 30-90 s here)."""
PROMPT_TEXT = "the prompt words"
STYLE = "speak slowly and calmly"


def prompt(seconds: float = 3.0, seed: int = 0) -> np.ndarray:
    import cosyvoice2_fixture

    pcm: np.ndarray = cosyvoice2_fixture.prompt_pcm(seconds, seed)
    return pcm


@pytest.fixture(scope="session")
def upstream_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if _MISSING:
        pytest.skip(_MISSING)
    use_upstream()
    import cosyvoice2_fixture

    out = tmp_path_factory.mktemp("cosyvoice23")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {family: cosyvoice2_fixture.build(out, family=family) for family in FAMILIES}


def make_engine(model: Path, tmp: Path, **kwargs: Any) -> Any:
    from lib.engines.cosyvoice import CosyVoiceEngine

    config = CosyVoiceConfig(
        model_dir=str(model),
        repo_dir=str(upstream_dir()),
        device="cpu",
        fingerprint_file=str(tmp / "fp.json"),
        **kwargs,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return CosyVoiceEngine(config)


@pytest.fixture(scope="session")
def engines(upstream_models: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    built = {family: make_engine(path, tmp_path_factory.mktemp("fp")) for family, path in upstream_models.items()}
    yield built
    for engine in built.values():
        engine.close()


@pytest.fixture(scope="session")
def voices(engines: dict[str, Any]) -> dict[str, VoiceProfile]:
    return {family: engine.extract_voice(prompt(seed=3), PROMPT_TEXT) for family, engine in engines.items()}


def voice_for(engine: Any, voice: VoiceProfile, mode: str) -> VoiceProfile:
    return engine.preset_voice("preset-qwen") if mode == "preset" else voice


def say(engine: Any, voice: VoiceProfile, mode: str, text: str = "Hello there, how are you?", **kw: Any) -> Any:
    args: dict[str, Any] = {"style": STYLE if mode == "instruct" else "", "seed": 7, "speed": 1.0, **kw}
    audio = engine.synthesise(text, voice_for(engine, voice, mode), mode=mode, **args).audio
    assert audio.dtype == np.float32 and audio.ndim == 1 and audio.size > 0
    assert np.all(np.isfinite(audio)) and np.abs(audio).max() <= 1.0
    return audio


class _Borrowed:
    """A session engine lent to a service (closing the service must not close it); the
    model version can be overridden to see what a changed version does to the keys."""

    def __init__(self, engine: Any, model_version: str | None = None) -> None:
        self._engine = engine
        self.model_version = model_version or engine.model_version

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def close(self) -> None:
        return None


def _service(engine: Any, tmp: Path, model_version: str | None = None) -> Any:
    from lib.pipeline.service import TTSService

    config = load_config(overrides={
        "cache.dir": str(tmp / "cache"), "engine": "cosyvoice", "voices.prewarm": False,
        "readings.lexicon": str(tmp / "lexicon.json"),
    })  # fmt: skip
    return TTSService(config, engine=_Borrowed(engine, model_version))


def _fields(mode: str, seed: int = 7) -> dict[str, Any]:
    fields: dict[str, Any] = {"mode": mode, "seed": seed}
    if mode == "preset":
        fields["voice"] = "preset-qwen"
    else:
        fields["prompt_audio"] = (16_000, prompt(seed=4))
        if mode == "zero_shot":
            fields["prompt_text"] = PROMPT_TEXT
    if mode == "instruct":
        fields["style"] = STYLE
    return fields


# --- the fixtures and the engine's view of them -------------------------------------------


@needs_upstream
@pytest.mark.parametrize("family", FAMILIES)
def test_fixture_has_the_published_layout(upstream_models: dict[str, Path], family: str) -> None:
    import torch

    model = upstream_models[family]
    config = "cosyvoice3.yaml" if family == "v3" else "cosyvoice2.yaml"
    tokenizer = "speech_tokenizer_v3.onnx" if family == "v3" else "speech_tokenizer_v2.onnx"
    names = {p.relative_to(model).as_posix() for p in model.rglob("*") if p.is_file()}
    blank = {
        f"CosyVoice-BlankEN/{n}"
        for n in (
            "config.json",
            "generation_config.json",
            "merges.txt",
            "model.safetensors",
            "tokenizer_config.json",
            "vocab.json",
        )
    }
    assert names == {config, "llm.pt", "flow.pt", "hift.pt", "campplus.onnx", tokenizer, "spk2info.pt"} | blank
    qwen = json.loads((model / "CosyVoice-BlankEN" / "config.json").read_text())
    assert qwen["model_type"] == "qwen2" and qwen["torch_dtype"] == "bfloat16" and qwen["vocab_size"] == 151_936
    speakers = torch.load(model / "spk2info.pt", weights_only=True)
    assert list(speakers) == ["preset-qwen"] and "prompt_speech_feat" in speakers["preset-qwen"]
    size = sum((model / n).stat().st_size for n in names)
    assert size < 40e6, f"{model.name} is {size / 1e6:.1f} MB"


@needs_upstream
@pytest.mark.parametrize("family", FAMILIES)
def test_family_is_detected_and_loaded_by_automodel(engines: dict[str, Any], family: str) -> None:
    engine = engines[family]
    assert engine.family == family and engine.sample_rate == 24_000
    assert engine._rt.source == "upstream" and engine._rt.has_auto_model
    assert type(engine.cosyvoice).__name__ == ("CosyVoice3" if family == "v3" else "CosyVoice2")
    assert engine.cosyvoice.__module__ == "cosyvoice.cli.cosyvoice"
    assert str(upstream_dir().resolve()) in sys.modules["cosyvoice.cli.cosyvoice"].__file__
    assert engine.modes == set(MODES) and engine.presets() == ["preset-qwen"]
    assert engine.model_version.startswith(f"{family}-") and engine.version_parts.family == family
    # transformers 5 would load the bfloat16 BlankEN config as bfloat16 and crash the LLM.
    dtypes = {p.dtype for p in engine.cosyvoice.model.llm.parameters()}
    import torch

    assert dtypes == {torch.float32}
    assert engine.normaliser == "wetext" and engine.cosyvoice.frontend.text_frontend == "wetext"
    assert engine.native_stream and engine.version_parts.stream == "native"
    assert isinstance(engine, VoiceConverter) and engine.converts


# --- every mode through the service --------------------------------------------------------


@needs_upstream
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode", MODES)
def test_miss_then_hit_with_identical_audio(engines: dict[str, Any], tmp_path: Path, family: str, mode: str) -> None:
    from lib.pipeline.service import synthesise_with_cache

    engine = engines[family]
    svc = _service(engine, tmp_path)
    calls = svc.dashboard.snapshot(caller=LOCAL)["engine_calls"]
    first = synthesise_with_cache("Cache me if you can.", service=svc, **_fields(mode))
    second = synthesise_with_cache("Cache me if you can.", service=svc, **_fields(mode))
    assert (first.cache, second.cache) == ("MISS", "HIT") and first.key == second.key
    assert np.array_equal(first.audio.pcm, second.audio.pcm) and first.sample_rate == 24_000
    assert svc.dashboard.snapshot(caller=LOCAL)["engine_calls"] == calls + 1
    svc.close()


@needs_upstream
@pytest.mark.parametrize("family", FAMILIES)
def test_prompt_frontend_runs_once_per_voice_and_features_persist(
    engines: dict[str, Any], tmp_path: Path, family: str
) -> None:
    from lib.pipeline.service import synthesise_with_cache

    engine = engines[family]
    frontend = engine.cosyvoice.frontend
    calls = {"_extract_speech_token": 0, "_extract_spk_embedding": 0, "_extract_speech_feat": 0}
    for attr in calls:
        real = getattr(frontend, attr)

        def counted(*args: Any, _real: Any = real, _attr: str = attr, **kwargs: Any) -> Any:
            calls[_attr] += 1
            return _real(*args, **kwargs)

        setattr(frontend, attr, counted)
    try:
        svc = _service(engine, tmp_path)
        voice = {"prompt_audio": (16_000, prompt(seed=8)), "prompt_text": PROMPT_TEXT}
        audio_only = {"prompt_audio": voice["prompt_audio"]}
        # A voice is (prompt audio, transcript); cross-lingual and instruct use the audio alone.
        results = [
            synthesise_with_cache(f"Sentence {n}.", service=svc, seed=7, mode="zero_shot", **voice) for n in range(3)
        ]
        assert calls == dict.fromkeys(calls, 1)
        results.append(synthesise_with_cache("Sentence 3.", service=svc, seed=7, mode="cross_lingual", **audio_only))
        results.append(
            synthesise_with_cache("Sentence 4.", service=svc, seed=7, mode="instruct", style=STYLE, **audio_only)
        )
        assert [r.cache for r in results] == ["MISS"] * 5
        assert calls == dict.fromkeys(calls, 2)
        svc.close()
        # A restart on the same cache directory: the features come back from the voice
        # cache, and once the engine's table forgot them, they are deserialised, not rerun.
        engine._table.clear()
        loads = engine._table.loads
        again = _service(engine, tmp_path)
        restored = synthesise_with_cache(
            "Sentence 0.", service=again, seed=7, mode="zero_shot", use_cache=False, **voice
        )
        assert calls == dict.fromkeys(calls, 2) and engine._table.loads == loads + 1
        assert np.array_equal(restored.audio.pcm, results[0].audio.pcm)
        again.close()
    finally:
        for attr in calls:
            delattr(frontend, attr)


@needs_upstream
@pytest.mark.parametrize("family", FAMILIES)
def test_profile_holds_the_v2_v3_feature_set(
    engines: dict[str, Any], voices: dict[str, VoiceProfile], family: str
) -> None:
    from lib.engines.cosyvoice.speakers import load_features

    engine = engines[family]
    features = load_features(engine._rt.torch, VoiceProfile.from_bytes(voices[family].to_bytes()).blob, "cpu")
    assert set(features) == {
        "prompt_text",
        "prompt_text_len",
        "llm_prompt_speech_token",
        "llm_prompt_speech_token_len",
        "flow_prompt_speech_token",
        "flow_prompt_speech_token_len",
        "prompt_speech_feat",
        "prompt_speech_feat_len",
        "llm_embedding",
        "flow_embedding",
    }
    tokens = features["flow_prompt_speech_token"].shape[1]
    # 25 Hz speech tokens (3 s -> 75) and 24 kHz mel frames trimmed to exactly two per token.
    assert tokens == 75 and features["prompt_speech_feat"].shape == (1, 2 * tokens, 80)
    text = engine.cosyvoice.frontend.tokenizer.decode(features["prompt_text"].reshape(-1).tolist())
    assert text.endswith(PROMPT_TEXT)
    if family == "v3":  # the system prompt CosyVoice3 was trained with
        assert features["prompt_text"].reshape(-1).tolist().count(151646) == 1  # <|endofprompt|>


# --- what the model hears --------------------------------------------------------------------


def _spy_llm(engine: Any) -> tuple[list[dict[str, Any]], Any]:
    llm = engine.cosyvoice.model.llm
    heard: list[dict[str, Any]] = []
    real = llm.inference

    def spy(**kwargs: Any) -> Any:
        heard.append(
            {
                k: v.reshape(-1).tolist()
                for k, v in kwargs.items()
                if k in ("text", "prompt_text", "prompt_speech_token")
            }
        )
        return real(**kwargs)

    llm.inference = spy
    return heard, llm


@needs_upstream
@pytest.mark.parametrize("family", FAMILIES)
def test_instruct2_gives_the_llm_the_instruction_and_the_voice(
    engines: dict[str, Any], voices: dict[str, VoiceProfile], family: str
) -> None:
    engine = engines[family]
    heard, llm = _spy_llm(engine)
    try:
        say(engine, voices[family], "instruct", "One two.")
        say(engine, voices[family], "zero_shot", "One two.")
    finally:
        del llm.inference
    tokenizer = engine.cosyvoice.frontend.tokenizer
    instruction = tokenizer.decode(heard[0]["prompt_text"])
    expected = f"You are a helpful assistant. {STYLE}" if family == "v3" else STYLE
    assert instruction == expected and heard[0]["prompt_text"][-1] == 151646  # + <|endofprompt|>
    assert heard[0]["prompt_speech_token"] == []  # instruct2 drops the prompt's speech tokens
    assert tokenizer.decode(heard[1]["prompt_text"]).endswith(PROMPT_TEXT) and heard[1]["prompt_speech_token"]


@needs_upstream
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("mode", ["zero_shot", "cross_lingual"])
def test_text_is_normalised_by_wetext(
    engines: dict[str, Any], voices: dict[str, VoiceProfile], family: str, mode: str
) -> None:
    engine = engines[family]
    heard, llm = _spy_llm(engine)
    try:
        say(engine, voices[family], mode, "请到3号窗口。")
    finally:
        del llm.inference
    spoken = engine.cosyvoice.frontend.tokenizer.decode(heard[0]["text"])
    if family == "v3" and mode == "cross_lingual":
        # Upstream skips normalisation of text holding "<|"; the engine normalises first.
        assert spoken == "You are a helpful assistant.请到三号窗口。"
    else:
        assert spoken == "请到三号窗口。"


# --- streaming -----------------------------------------------------------------------------------

LONG = "This sentence is long enough for several streamed chunks of speech."


@needs_upstream
@pytest.mark.parametrize("family", FAMILIES)
def test_native_stream_joins_to_the_cached_audio(engines: dict[str, Any], tmp_path: Path, family: str) -> None:
    from lib.pipeline.service import synthesise_with_cache

    engine = engines[family]
    svc = _service(engine, tmp_path)
    fields = _fields("preset", seed=7)
    voice = engine.preset_voice("preset-qwen")
    chunks = list(engine.stream(LONG, voice, style="", seed=7, speed=1.0, mode="preset"))
    again = list(engine.stream(LONG, voice, style="", seed=7, speed=1.0, mode="preset"))
    assert len(chunks) >= 3 and all(c.dtype == np.float32 for c in chunks)
    # Upstream's schedule: 25 tokens (two 480-sample frames each) less the 8 frames HiFT keeps back.
    if family == "v2":
        assert chunks[0].size == 25 * 2 * 480 - 8 * 480
    assert [c.size for c in again] == [c.size for c in chunks]  # the schedule was reset
    joined = np.concatenate(chunks)
    assert np.array_equal(engine.synthesise(LONG, voice, style="", seed=7, speed=1.0, mode="preset").audio, joined)
    # Through the service the answer streams finished (trimmed, levelled) sentence by sentence,
    # and what was streamed is what is cached.
    answer = svc.stream(TTSRequest(text=LONG, **fields))
    streamed = np.concatenate(list(answer.chunks))
    assert answer.cache == "MISS" and answer.result().cache == "MISS"
    again_cached = synthesise_with_cache(LONG, service=svc, **fields)
    assert again_cached.cache == "HIT"
    assert np.array_equal(again_cached.audio.pcm, streamed)
    svc.close()


@needs_upstream
@pytest.mark.parametrize("family", FAMILIES)
def test_the_service_streams_natively_when_results_are_not_levelled(
    engines: dict[str, Any], tmp_path: Path, family: str
) -> None:
    # With no loudness target and no tail, a one-sentence answer is the engine's audio
    # untouched: the service passes on upstream's own chunks as they come and caches
    # their concatenation.
    from lib.pipeline.service import TTSService

    engine = engines[family]
    overrides = {"cache.dir": str(tmp_path / "cache"), "engine": "cosyvoice", "voices.prewarm": False}
    config = load_config(overrides=overrides)
    # segments.loudness: null and segments.tail: 0 in config.yaml
    config = dataclasses.replace(config, segments=dataclasses.replace(config.segments, loudness=None, tail=0.0))
    svc = TTSService(config, engine=_Borrowed(engine, None))
    fields = _fields("preset", seed=7)
    voice = engine.preset_voice("preset-qwen")
    native = list(engine.stream(LONG, voice, style="", seed=7, speed=1.0, mode="preset"))
    try:
        answer = svc.stream(TTSRequest(text=LONG, **fields))
        streamed = list(answer.chunks)
        assert answer.result().cache == "MISS"
        hit = svc.synthesise(TTSRequest(text=LONG, **fields))
    finally:
        svc.close()
    assert len(streamed) == len(native) >= 3
    assert all(np.array_equal(a, float_to_int16(b)) for a, b in zip(streamed, native, strict=True))
    assert hit.cache == "HIT" and np.array_equal(hit.audio.pcm, np.concatenate(streamed))


@needs_upstream
@pytest.mark.parametrize("family", FAMILIES)
def test_native_stream_does_not_depend_on_thread_timing(
    engines: dict[str, Any], voices: dict[str, VoiceProfile], family: str
) -> None:
    # The LLM samples in a thread while the main thread vocodes earlier chunks; CosyVoice2's
    # HiFT draws from the random generator too. Slow one side, then the other: the
    # interleaving changes completely, the audio must not.
    engine = engines[family]
    model = engine.cosyvoice.model
    reference = engine.synthesise(LONG, voices[family], style="", seed=2, speed=1.0, mode="zero_shot").audio

    def slowed(owner: Any, attr: str, delay: float) -> Any:
        inner = getattr(owner, attr)

        def slow(*args: Any, **kwargs: Any) -> Any:
            time.sleep(delay)
            return inner(*args, **kwargs)

        setattr(owner, attr, slow)
        return inner

    for owner, attr, delay in ((model, "token2wav", 0.3), (model.llm, "sampling", 0.01)):
        inner = slowed(owner, attr, delay)
        try:
            audio = engine.synthesise(LONG, voices[family], style="", seed=2, speed=1.0, mode="zero_shot").audio
        finally:
            setattr(owner, attr, inner)
        assert np.array_equal(audio, reference), attr


@needs_upstream
def test_first_chunk_comes_before_the_llm_has_finished(
    engines: dict[str, Any], voices: dict[str, VoiceProfile]
) -> None:
    engine = engines["v3"]
    llm = engine.cosyvoice.model.llm
    sampled = [0]
    inner = llm.sampling

    def counting(*args: Any, **kwargs: Any) -> Any:
        sampled[0] += 1
        time.sleep(0.02)  # a slower LLM, as a real one is next to this tiny vocoder
        return inner(*args, **kwargs)

    llm.sampling = counting
    try:
        stream = engine.stream(LONG, voices["v3"], style="", seed=2, speed=1.0, mode="zero_shot")
        next(stream)
        at_first = sampled[0]
        rest = list(stream)
    finally:
        llm.sampling = inner
    assert rest and at_first < sampled[0]


@needs_upstream
def test_speed_uses_the_per_segment_path(engines: dict[str, Any], voices: dict[str, VoiceProfile]) -> None:
    engine = engines["v2"]
    chunks = list(engine.stream(LONG, voices["v2"], style="", seed=1, speed=1.5, mode="zero_shot"))
    normal = say(engine, voices["v2"], "zero_shot", LONG, seed=1)
    assert len(chunks) == 1 and chunks[0].size < normal.size * 0.8  # upstream refuses speed when streaming


@needs_upstream
def test_native_stream_off_is_another_model_version(
    upstream_models: dict[str, Path], engines: dict[str, Any], tmp_path: Path
) -> None:
    plain = make_engine(upstream_models["v3"], tmp_path, native_stream=False)
    try:
        assert plain.version_parts.stream == "segments" and not plain.native_stream
        assert plain.model_version != engines["v3"].model_version
        assert dataclasses.replace(plain.version_parts, stream="native") == engines["v3"].version_parts
        voice = plain.extract_voice(prompt(seed=3), PROMPT_TEXT)
        assert len(list(plain.stream(LONG, voice, style="", seed=1, speed=1.0, mode="zero_shot"))) == 1
    finally:
        plain.close()


# --- voice conversion ---------------------------------------------------------------------------


@needs_upstream
@pytest.mark.parametrize("family", FAMILIES)
def test_convert_respeaks_the_source_in_the_voice(
    engines: dict[str, Any], voices: dict[str, VoiceProfile], family: str
) -> None:
    engine = engines[family]
    frontend = engine.cosyvoice.frontend
    source = prompt(seconds=2.0, seed=5)
    runs: list[str] = []
    for attr in ("_extract_speech_token", "_extract_spk_embedding", "_extract_speech_feat"):
        real = getattr(frontend, attr)
        setattr(frontend, attr, lambda *a, _r=real, _n=attr, **k: (runs.append(_n), _r(*a, **k))[1])
    try:
        first = engine.convert(source, voices[family], seed=1, speed=1.0)
    finally:
        for attr in ("_extract_speech_token", "_extract_spk_embedding", "_extract_speech_feat"):
            delattr(frontend, attr)
    assert runs == ["_extract_speech_token"]  # the source only: the voice's features are cached
    assert first.info["source_tokens"] == 50 and first.audio.size == 50 * 2 * 480  # 25 Hz in, 2 frames each out
    assert np.array_equal(first.audio, engine.convert(source, voices[family], seed=1, speed=1.0).audio)
    other = engine.convert(source, engine.preset_voice("preset-qwen"), seed=1, speed=1.0).audio
    assert other.size == first.audio.size and not np.array_equal(other, first.audio)
    assert engine.convert(source, voices[family], seed=1, speed=1.5).audio.size < first.audio.size
    with pytest.raises(PromptAudioError, match="source audio is silent"):
        engine.convert(np.zeros(32_000, dtype=np.int16), voices[family], seed=1, speed=1.0)


# --- the model version -----------------------------------------------------------------------------


@needs_upstream
def test_every_version_part_changes_the_cache_key(engines: dict[str, Any], tmp_path: Path) -> None:
    from lib.engines.cosyvoice.modeldir import inspect_model_dir
    from lib.engines.cosyvoice.version import model_version
    from lib.request.types import TTSRequest

    engine = engines["v3"]
    parts = engine.version_parts
    assert parts.code.startswith("upstream#") and parts.torch == engine._rt.torch.__version__
    assert (parts.device, parts.fp16, parts.normaliser, parts.instruct) == ("cpu", False, "wetext", False)
    changes = {
        "family": "v2",
        "instruct": True,
        "code": "upstream@0123456789ab#0000",
        "normaliser": "ttsfrd",
        "torch": "2.14.1",
        "device": "cuda",
        "fp16": True,
        "stream": "segments",
        "reading": "reading-0",
    }
    assert set(changes) == {f.name for f in dataclasses.fields(parts)}
    memo = tmp_path / "fp.json"
    versions = {"base": model_version(engine.model, parts, memo)}
    assert versions["base"] == engine.model_version
    for name, value in changes.items():
        versions[name] = model_version(engine.model, dataclasses.replace(parts, **{name: value}), memo)
    versions["normaliser=none"] = model_version(engine.model, dataclasses.replace(parts, normaliser="none"), memo)
    assert len(set(versions.values())) == len(versions)
    request = TTSRequest(text="Same words.", voice="preset-qwen", mode="preset", seed=1)
    keys = set()
    for name, version in versions.items():
        svc = _service(engine, tmp_path / name, model_version=version)
        keys.add(svc.resolve(request).key)
        svc.close()
    assert len(keys) == len(versions)
    # The weights: the content decides, not the path; any file of the directory counts.
    copy = tmp_path / "elsewhere" / engine.model.path.name
    shutil.copytree(engine.model.path, copy)
    assert model_version(inspect_model_dir(copy), parts, memo) == engine.model_version
    merges = copy / "CosyVoice-BlankEN" / "merges.txt"
    merges.write_text(merges.read_text() + "a b\n")
    assert model_version(inspect_model_dir(copy), parts, memo) != engine.model_version


def test_code_identity_follows_the_code_and_reads_a_commit(tmp_path: Path) -> None:
    from lib.engines.cosyvoice.upstream import code_identity

    repo = tmp_path / "CosyVoice"
    (repo / "cosyvoice" / "cli").mkdir(parents=True)
    cli = repo / "cosyvoice" / "cli" / "cosyvoice.py"
    cli.write_text("X = 1\n")
    first = code_identity("upstream", str(cli), repo)
    assert first.startswith("upstream#")
    cli.write_text("X = 2\n")
    second = code_identity("upstream", str(cli), repo)
    assert second != first
    (repo / ".git" / "refs" / "heads").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (repo / ".git" / "refs" / "heads" / "main").write_text("ace7c47f41bbd303aa6bf1ea80e6f9fbd595cd40\n")
    assert code_identity("upstream", str(cli), repo) == "upstream@ace7c47f41bb#" + second.split("#")[1]
    shutil.rmtree(repo / ".git" / "refs")
    (repo / ".git" / "packed-refs").write_text(
        "# pack-refs\n1111111111111111111111111111111111111111 refs/heads/main\n"
    )
    assert code_identity("upstream", str(cli), repo).startswith("upstream@111111111111#")


def test_normaliser_is_read_from_the_frontend() -> None:
    from types import SimpleNamespace

    from lib.engines.cosyvoice.upstream import normaliser_of

    assert normaliser_of(SimpleNamespace(text_frontend="wetext")) == "wetext"
    assert normaliser_of(SimpleNamespace(text_frontend="ttsfrd")) == "ttsfrd"
    assert normaliser_of(SimpleNamespace(text_frontend="")) == "none"
    assert normaliser_of(SimpleNamespace()) == "none"  # cosyvoice-minicpmo: no normaliser


# --- two processes ------------------------------------------------------------------------------------

_CHILD = """
import json, logging, sys, warnings
import numpy as np
warnings.simplefilter("ignore")
sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
from test_cosyvoice_upstream import _fields, prompt
from lib.config import load_config
from lib.pipeline.service import TTSService, synthesise_with_cache
out = {{"root_level": None}}
for family, model in {models!r}.items():
    config = load_config(overrides={{"cache.dir": {cache!r} + family, "engine": "cosyvoice", "voices.prewarm": False,
                                    "cosyvoice.model_dir": model, "cosyvoice.repo_dir": {repo!r},
                                    "cosyvoice.device": "cpu", "cosyvoice.fingerprint_file": {fp!r}}})
    svc = TTSService(config)
    out["root_level"] = logging.getLogger().level
    for mode in {modes!r}:
        result = synthesise_with_cache("Two processes, one answer.", service=svc, **_fields(mode, seed=2))
        np.save({outdir!r} + "/" + family + "-" + mode + ".npy", result.audio.pcm)
        out[family + "-" + mode] = result.key
    converted = svc.engine.convert(prompt(2.0, 5), svc.engine.preset_voice("preset-qwen"), seed=3, speed=1.0)
    np.save({outdir!r} + "/" + family + "-convert.npy", converted.audio)
    svc.close()
print(json.dumps(out))
"""


@needs_upstream
def test_same_requests_give_identical_audio_in_two_processes(
    upstream_models: dict[str, Path], engines: dict[str, Any], tmp_path: Path
) -> None:
    from lib.pipeline.service import synthesise_with_cache

    script = _CHILD.format(
        root=str(ROOT),
        tests=str(ROOT / "tests"),
        models={k: str(v) for k, v in upstream_models.items()},
        cache=str(tmp_path / "child-"),
        repo=str(upstream_dir()),
        fp=str(tmp_path / "fp.json"),
        modes=CROSS_PROCESS_MODES,
        outdir=str(tmp_path),
    )
    child = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONWARNINGS": "ignore"},
    )
    assert child.returncode == 0, child.stderr[-3000:]
    theirs = json.loads(child.stdout.strip().splitlines()[-1])
    assert theirs["root_level"] == 30  # upstream's logging.basicConfig(DEBUG) at import was undone
    for family, engine in engines.items():
        svc = _service(engine, tmp_path / family)
        for mode in CROSS_PROCESS_MODES:
            mine = synthesise_with_cache("Two processes, one answer.", service=svc, **_fields(mode, seed=2))
            assert mine.cache == "MISS" and mine.key == theirs[f"{family}-{mode}"], (family, mode)
            assert np.array_equal(mine.audio.pcm, np.load(tmp_path / f"{family}-{mode}.npy")), (family, mode)
        svc.close()
        converted = engine.convert(prompt(2.0, 5), engine.preset_voice("preset-qwen"), seed=3, speed=1.0).audio
        assert np.array_equal(converted, np.load(tmp_path / f"{family}-convert.npy")), family


@needs_upstream
def test_an_abandoned_stream_leaves_nothing_behind(engines: dict[str, Any], voices: dict[str, VoiceProfile]) -> None:
    # A client that goes away mid-stream closes the generator while upstream's LLM thread is
    # still sampling. The engine must stop that thread and drop its state before the next
    # request, or the next request would share the LLM's random stream and hang on the lock.
    engine = engines["v3"]
    reference = say(engine, voices["v3"], "zero_shot", LONG, seed=7)
    stream = engine.stream(LONG, voices["v3"], style="", seed=2, speed=1.0, mode="zero_shot")
    next(stream)
    stream.close()
    model = engine.cosyvoice.model
    assert model.llm_end_dict == {} and model.tts_speech_token_dict == {}
    done: list[Any] = []
    worker = threading.Thread(target=lambda: done.append(say(engine, voices["v3"], "zero_shot", LONG, seed=7)))
    worker.start()
    worker.join(timeout=300)
    assert done and np.array_equal(done[0], reference)


@needs_upstream
def test_v3_says_a_lexicon_reading_as_its_pinyin_tokens(
    engines: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lexicon entry reaches CosyVoice3 as its own pinyin tokens (the text its frontend
    normalises and tokenises is recorded on the real frontend); CosyVoice2 gets the
    characters (it has no such tokens)."""
    from lib.request.access import LOCAL
    from lib.request.types import TTSRequest

    seen: dict[str, list[str]] = {}
    for family in ("v3", "v2"):
        engine = engines[family]
        frontend = engine.cosyvoice.frontend
        original = frontend.text_normalize
        calls = seen.setdefault(family, [])

        def spy(text: Any, *args: Any, _calls: list[str] = calls, _original: Any = original, **kwargs: Any) -> Any:
            _calls.append(str(text))
            return _original(text, *args, **kwargs)

        monkeypatch.setattr(frontend, "text_normalize", spy)
        svc = _service(engine, tmp_path / family)
        try:
            svc.readings.add("重庆", "zhong4 qing4", caller=LOCAL)
            svc.synthesise(TTSRequest(text="下一站重庆。", voice="preset-qwen", mode="preset", seed=1))
        finally:
            svc.close()
    assert any("[zh][òng][q][ìng]" in text for text in seen["v3"]), seen["v3"]
    assert any("重庆" in text for text in seen["v2"]) and not any("[zh]" in text for text in seen["v2"])
