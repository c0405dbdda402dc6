"""The CosyVoice engine against the real CosyVoice code, on a tiny random-weight model.

The model is built per session by ``tests/cosyvoice_fixture.py`` (see its docstring to
regenerate by hand). Tests that need torch and the CosyVoice code skip with a reason when
the stack is not installed (``bash tests/install_cosyvoice.sh`` installs it); the checks of
the model directory and of the install message run everywhere.

Determinism is asserted bit for bit (``np.array_equal``), within a process and across two.
Network access is blocked while engines load and run, so any attempt to download shows up
as a failure.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import run_script
from cosyvoice_fixture import prompt_pcm

from lib.config import CosyVoiceConfig, load_config
from lib.engines.base import VoiceProfile
from lib.engines.cosyvoice import modeldir
from lib.engines.cosyvoice.modeldir import fingerprint, inspect_model_dir
from lib.errors import EngineError, EngineUnavailableError, NotFoundError, PromptAudioError, ValidationError
from lib.request.access import LOCAL

ROOT = Path(__file__).resolve().parents[1]

# The CosyVoice code and its dependencies warn a lot (torch.cuda.amp deprecation inside the
# LLM thread, pkg_resources, diffusers); none of it is ours, and the suite turns warnings
# into errors.
pytestmark = [
    pytest.mark.filterwarnings("ignore::FutureWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]


def _stack_missing() -> str | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            import cosyvoice.cli.cosyvoice  # noqa: F401
            import torch  # noqa: F401
        except ImportError as exc:
            return f"CosyVoice stack not installed ({exc}); run: bash tests/install_cosyvoice.sh"
    return None


# In CI the stack is installed by ./run.sh test, so a missing stack must fail, not skip.
_MISSING = None if os.environ.get("CI") else _stack_missing()
needs_stack = pytest.mark.skipif(_MISSING is not None, reason=_MISSING or "")


@contextlib.contextmanager
def no_network() -> Iterator[list[Any]]:
    """Make every outbound connection fail loudly and record the attempts."""
    attempts: list[Any] = []
    real_connect, real_connect_ex = socket.socket.connect, socket.socket.connect_ex

    def refuse(self: socket.socket, address: Any) -> Any:
        if self.family == socket.AF_UNIX:
            return real_connect(self, address)
        attempts.append(address)
        raise OSError(f"network access blocked by the test: {address}")

    def refuse_ex(self: socket.socket, address: Any) -> Any:
        if self.family == socket.AF_UNIX:
            return real_connect_ex(self, address)
        attempts.append(address)
        return 111

    socket.socket.connect = refuse  # type: ignore[method-assign]
    socket.socket.connect_ex = refuse_ex  # type: ignore[method-assign]
    try:
        yield attempts
    finally:
        socket.socket.connect = real_connect  # type: ignore[method-assign]
        socket.socket.connect_ex = real_connect_ex  # type: ignore[method-assign]


# --- the model directory (no torch needed) ------------------------------------------------


def test_missing_model_dir_names_directory_files_and_remedy(tmp_path: Path) -> None:
    from lib.engines.cosyvoice import CosyVoiceEngine

    missing = tmp_path / "CosyVoice-300M"
    with no_network() as attempts, pytest.raises(EngineUnavailableError) as caught:
        CosyVoiceEngine(CosyVoiceConfig(model_dir=str(missing), fingerprint_file=str(tmp_path / "fp.json")))
    message = str(caught.value)
    assert str(missing) in message
    for expected in ("cosyvoice.yaml", "cosyvoice2.yaml", "llm.pt", "flow.pt", "hift.pt", "campplus.onnx",
                     "speech_tokenizer_v1.onnx", "modelscope download", "README.md"):  # fmt: skip
        assert expected in message
    assert attempts == []
    assert caught.value.http_status == 503


def test_unset_model_dir_says_how_to_set_it() -> None:
    with pytest.raises(EngineUnavailableError, match=r"cosyvoice\.model_dir"):
        inspect_model_dir(None)


def test_incomplete_model_dir_lists_what_is_missing(tmp_path: Path) -> None:
    model = tmp_path / "CosyVoice2-0.5B"
    model.mkdir()
    (model / "cosyvoice2.yaml").write_text("sample_rate: 24000\n")
    (model / "llm.pt").write_bytes(b"x")
    (model / "flow.pt").write_bytes(b"")  # empty counts as missing (an interrupted copy)
    with pytest.raises(EngineUnavailableError) as caught:
        inspect_model_dir(model)
    message = str(caught.value)
    assert str(model) in message and "CosyVoice2-0.5B" in message
    for missing in ("flow.pt", "hift.pt", "campplus.onnx", "speech_tokenizer_v2.onnx", "CosyVoice-BlankEN/config.json"):
        assert missing in message
    assert "llm.pt, " not in message.split("missing")[0]


def test_unknown_family_is_refused(tmp_path: Path) -> None:
    (tmp_path / "llm.pt").write_bytes(b"x")
    with pytest.raises(EngineUnavailableError, match="model family is unknown"):
        inspect_model_dir(tmp_path)


def _fake_complete_dir(root: Path) -> Path:
    model = root / "CosyVoice-300M"
    model.mkdir(parents=True)
    for name in ("cosyvoice.yaml", "llm.pt", "flow.pt", "hift.pt", "campplus.onnx", "speech_tokenizer_v1.onnx"):
        (model / name).write_bytes(name.encode() * 10)
    return model


def test_fingerprint_hashes_once_and_follows_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = inspect_model_dir(_fake_complete_dir(tmp_path))
    memo = tmp_path / "memo" / "fp.json"
    monkeypatch.setattr(modeldir, "_MEMO", {})
    hashed: list[str] = []
    real = modeldir.hashlib.file_digest

    def counting(handle: Any, name: str) -> Any:
        hashed.append(handle.name)
        return real(handle, name)

    monkeypatch.setattr(modeldir.hashlib, "file_digest", counting)
    first = fingerprint(model, "v")
    assert len(first) == 12 and len(hashed) == 6
    assert fingerprint(model, "v", memo) == first  # remembered in memory: nothing hashed again
    assert len(hashed) == 6 and json.loads(memo.read_text())  # and written to the memo file
    monkeypatch.setattr(modeldir, "_MEMO", {})  # a new process: only the memo file remains
    assert fingerprint(model, "v", memo) == first and len(hashed) == 6
    assert fingerprint(model, "other-variant", memo) != first
    flow = model.path / "flow.pt"
    flow.write_bytes(b"new weights")
    changed = fingerprint(model, "v", memo)
    assert changed != first and hashed[-1].endswith("flow.pt") and len(hashed) == 7


def test_engine_without_torch_gives_the_install_command(tmp_path: Path) -> None:
    model = _fake_complete_dir(tmp_path)
    script = textwrap.dedent(f"""
        import sys
        sys.modules["torch"] = None  # as if torch were not installed
        import lib.engines.cosyvoice as cv  # importing must work without torch
        from lib.config import CosyVoiceConfig
        from lib.errors import EngineUnavailableError
        try:
            cv.CosyVoiceEngine(CosyVoiceConfig(model_dir={str(model)!r}))
        except EngineUnavailableError as exc:
            print(exc)
    """)
    out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "bash tests/install_cosyvoice.sh" in out.stdout and "--engine builtin" in out.stdout


# --- the real CosyVoice code on the tiny model ---------------------------------------------


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if _MISSING:
        pytest.skip(_MISSING)
    sys.path.insert(0, str(ROOT / "tests"))
    import cosyvoice_fixture
    from cosyvoice_code import use_installed

    use_installed()  # these tests run the installed cosyvoice-minicpmo package, not the upstream source

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cosyvoice_fixture.build(tmp_path_factory.mktemp("cosyvoice"))


@pytest.fixture(scope="session")
def instruct_model(tiny_model: Path) -> Path:
    # Same files; CosyVoice enables inference_instruct by the -Instruct in the name.
    link = tiny_model.parent / "CosyVoice-300M-Instruct-tiny"
    if not link.exists():
        link.symlink_to(tiny_model, target_is_directory=True)
    return link


def make_engine(model: Path, tmp: Path, **kwargs: Any) -> Any:
    from lib.engines.cosyvoice import CosyVoiceEngine

    config = CosyVoiceConfig(model_dir=str(model), device="cpu", fingerprint_file=str(tmp / "fp.json"), **kwargs)
    with warnings.catch_warnings(), no_network() as attempts:
        warnings.simplefilter("ignore")
        engine = CosyVoiceEngine(config)
    assert attempts == []
    return engine


@pytest.fixture(scope="session")
def engine(tiny_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    eng = make_engine(tiny_model, tmp_path_factory.mktemp("fp"))
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def instruct_engine(instruct_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    eng = make_engine(instruct_model, tmp_path_factory.mktemp("fp"))
    yield eng
    eng.close()


@pytest.fixture(scope="session")
def voice(engine: Any) -> VoiceProfile:
    profile: VoiceProfile = engine.extract_voice(prompt_pcm(), "a short prompt transcript")
    return profile


def say(engine: Any, voice: VoiceProfile, mode: str, text: str = "Hello there, how are you today?", **kw: Any) -> Any:
    args: dict[str, Any] = {"style": "", "seed": 7, "speed": 1.0, **kw}
    with no_network() as attempts:
        audio = engine.synthesise(text, voice, mode=mode, **args).audio
    assert attempts == []
    assert audio.dtype == np.float32 and audio.ndim == 1 and audio.size > 0
    assert np.all(np.isfinite(audio)) and np.abs(audio).max() <= 1.0
    return audio


@needs_stack
def test_engine_describes_the_model(engine: Any, instruct_engine: Any) -> None:
    assert engine.name == "cosyvoice" and engine.sample_rate == 22_050
    assert engine.model_version.startswith("300m-") and len(engine.model_version) == len("300m-") + 12
    assert engine.modes == {"zero_shot", "cross_lingual", "preset"}
    assert engine.style_modes == {"instruct"}
    assert engine.presets() == ["preset-a", "preset-b"]
    assert instruct_engine.modes == {"instruct", "preset"}
    assert instruct_engine.model_version != engine.model_version  # same files, different behaviour


@needs_stack
@pytest.mark.parametrize("mode", ["zero_shot", "cross_lingual", "preset"])
def test_each_mode_is_deterministic_per_seed(engine: Any, voice: VoiceProfile, mode: str) -> None:
    use = engine.preset_voice("preset-a") if mode == "preset" else voice
    first = say(engine, use, mode)
    assert np.array_equal(first, say(engine, use, mode))
    assert not np.array_equal(first, say(engine, use, mode, seed=8))


@needs_stack
def test_instruct_mode_speaks_a_preset_with_the_instruction(instruct_engine: Any, engine: Any,
                                                            voice: VoiceProfile) -> None:  # fmt: skip
    preset = instruct_engine.preset_voice("preset-b")
    llm = instruct_engine.cosyvoice.model.llm
    heard: list[list[int]] = []
    real = llm.inference

    def spy(**kwargs: Any) -> Any:  # what the LLM is given as its prompt
        heard.append(kwargs["prompt_text"].reshape(-1).tolist())
        return real(**kwargs)

    llm.inference = spy
    try:
        calm = say(instruct_engine, preset, "instruct", style="slow and calm")
        assert np.array_equal(calm, say(instruct_engine, preset, "instruct", style="slow and calm"))
        say(instruct_engine, preset, "instruct", style="fast and excited")
    finally:
        del llm.inference
    # The tiny random LLM barely reacts to its prompt, so check the wiring instead of the audio.
    tokenizer = instruct_engine.cosyvoice.frontend.tokenizer
    for tokens, style in zip(heard, ["slow and calm", "slow and calm", "fast and excited"], strict=True):
        expected = tokenizer.encode(style, allowed_special="all")
        assert tokens[: len(expected)] == expected and len(tokens) > len(expected)  # + the end-of-prompt marker
    assert not np.array_equal(calm, say(instruct_engine, instruct_engine.preset_voice("preset-a"), "instruct",
                                        style="slow and calm"))  # fmt: skip
    prompt_voice = instruct_engine.extract_voice(prompt_pcm(), "")
    with pytest.raises(ValidationError, match="preset voice"):
        instruct_engine.synthesise("hi there", prompt_voice, style="calm", seed=1, speed=1.0, mode="instruct")
    with pytest.raises(ValidationError, match="does not support instruct"):
        engine.synthesise("hi there", voice, style="calm", seed=1, speed=1.0, mode="instruct")


@needs_stack
def test_prompt_frontend_runs_once_per_voice(tiny_model: Path, tmp_path: Path) -> None:
    eng = make_engine(tiny_model, tmp_path)
    frontend = eng.cosyvoice.frontend
    calls = {"tokens": 0, "embedding": 0, "feat": 0}
    for attr, key in (("_extract_speech_token", "tokens"), ("_extract_spk_embedding", "embedding"),
                      ("_extract_speech_feat", "feat")):  # fmt: skip
        real = getattr(frontend, attr)

        def counted(*args: Any, _real: Any = real, _key: str = key, **kwargs: Any) -> Any:
            calls[_key] += 1
            return _real(*args, **kwargs)

        setattr(frontend, attr, counted)
    profile = eng.extract_voice(prompt_pcm(seed=3), "the prompt words")
    assert calls == {"tokens": 1, "embedding": 1, "feat": 1}
    texts = ["One sentence.", "Another, longer sentence here.", "A third one!", "Four."]
    for i, text in enumerate(texts):
        say(eng, profile, "zero_shot" if i % 2 == 0 else "cross_lingual", text)
    assert calls == {"tokens": 1, "embedding": 1, "feat": 1} and eng.frontend_runs == 1
    eng.close()


@needs_stack
def test_profile_survives_serialisation_and_eviction(engine: Any, voice: VoiceProfile) -> None:
    before = say(engine, voice, "zero_shot", "Reused from the voice cache.")
    restored = VoiceProfile.from_bytes(voice.to_bytes())
    engine._table.clear()  # as after a restart, or after the LRU dropped it
    loads, runs = engine._table.loads, engine.frontend_runs
    assert np.array_equal(before, say(engine, restored, "zero_shot", "Reused from the voice cache."))
    assert engine._table.loads == loads + 1 and engine.frontend_runs == runs


@needs_stack
def test_speaker_table_stays_within_its_byte_budget(tiny_model: Path, tmp_path: Path) -> None:
    eng = make_engine(tiny_model, tmp_path, prompt_cache_bytes=1)
    table = eng.cosyvoice.frontend.spk2info
    first = eng.extract_voice(prompt_pcm(seed=1), "first voice")
    reference = say(eng, first, "zero_shot")
    second = eng.extract_voice(prompt_pcm(seed=2), "second voice")
    prompt_ids = [spk for spk in table if spk.startswith("_tts_prompt_")]
    assert prompt_ids == ["_tts_prompt_" + second.params["feature_id"]]  # the first was evicted
    assert {"preset-a", "preset-b"} <= set(table)  # preset speakers are never evicted
    assert np.array_equal(reference, say(eng, first, "zero_shot"))  # reloaded from the profile
    assert eng.frontend_runs == 2
    eng.close()


@needs_stack
def test_model_directory_is_never_written(engine: Any, voice: VoiceProfile, tiny_model: Path) -> None:
    def snapshot() -> dict[str, str]:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(tiny_model.iterdir())}

    before = snapshot()
    say(engine, voice, "cross_lingual")
    engine.extract_voice(prompt_pcm(seed=5), "another")
    assert snapshot() == before  # in particular spk2info.pt: upstream's save_spkinfo would overwrite it


@needs_stack
def test_stream_joins_to_the_synthesised_audio(engine: Any, voice: VoiceProfile) -> None:
    text = "Streaming gives the same samples."
    chunks = list(engine.stream(text, voice, style="", seed=3, speed=1.0, mode="zero_shot"))
    assert chunks and all(c.dtype == np.float32 for c in chunks)
    assert np.array_equal(np.concatenate(chunks), say(engine, voice, "zero_shot", text, seed=3))


@needs_stack
def test_stream_can_be_resumed_from_other_threads(engine: Any, voice: VoiceProfile) -> None:
    # Web servers iterate sync generators in a thread pool: each chunk may be pulled by a
    # different thread, and the engine's lock must still be released at the end.
    import threading

    stream = engine.stream("Pulled from many threads. Really!", voice, style="", seed=4, speed=1.0, mode="zero_shot")
    chunks: list[np.ndarray] = []
    errors: list[BaseException] = []

    def pull(box: list[Any]) -> None:
        try:
            box.append(next(stream, None))
        except BaseException as exc:  # surfaced below
            errors.append(exc)
            box.append(None)

    while True:  # a new thread for every chunk, as a thread pool may do
        box: list[Any] = []
        worker = threading.Thread(target=pull, args=(box,))
        worker.start()
        worker.join(timeout=120)
        assert not worker.is_alive(), "the stream hung (its lock is owned by another thread)"
        if box[0] is None:
            break
        chunks.append(box[0])
    assert errors == []
    assert chunks
    assert np.array_equal(np.concatenate(chunks), say(engine, voice, "zero_shot", "Pulled from many threads. Really!",
                                                      seed=4))  # fmt: skip


@needs_stack
def test_speed_is_passed_through(engine: Any) -> None:
    preset = engine.preset_voice("preset-a")
    normal = say(engine, preset, "preset", speed=1.0)
    fast = say(engine, preset, "preset", speed=1.5)
    assert fast.size < normal.size * 0.8


@needs_stack
def test_bad_inputs_are_refused_clearly(engine: Any, voice: VoiceProfile) -> None:
    with pytest.raises(NotFoundError, match="preset-a"):
        engine.preset_voice("nobody")
    with pytest.raises(PromptAudioError, match="silent"):
        engine.extract_voice(np.zeros(16_000 * 2, dtype=np.int16), "")
    with pytest.raises(PromptAudioError, match="at least"):
        engine.extract_voice(prompt_pcm(0.2), "")
    with pytest.raises(PromptAudioError, match="at most 30"):
        engine.extract_voice(prompt_pcm(31), "")
    stale = VoiceProfile("cosyvoice", "300m-000000000000", "prompt", dict(voice.params), voice.blob)
    with pytest.raises(EngineError, match="extract the voice again"):
        engine.synthesise("hi", stale, style="", seed=0, speed=1.0, mode="zero_shot")
    no_text = engine.extract_voice(prompt_pcm(seed=9), "")
    with pytest.raises(ValidationError, match="transcript"):
        engine.synthesise("hi", no_text, style="", seed=0, speed=1.0, mode="zero_shot")


@needs_stack
def test_snapshot_download_can_never_run(engine: Any) -> None:
    import cosyvoice.cli.cosyvoice as cli

    with no_network() as attempts:
        with pytest.raises(RuntimeError, match="refusing to download"):
            cli.snapshot_download("iic/CosyVoice-300M")
        with pytest.raises(RuntimeError, match="refusing to download"):
            cli.CosyVoice("iic/CosyVoice-300M")  # a model *name*: upstream would download it
    assert attempts == []


# --- through the service: the cache in front of the engine ---------------------------------


class _Borrowed:
    """The session's engine lent to a service: closing the service must not close it."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def close(self) -> None:
        return None


def _service(engine: Any, tmp: Path) -> Any:
    from lib.pipeline.service import TTSService

    config = load_config(overrides={"cache.dir": str(tmp / "cache"), "engine": "cosyvoice", "voices.prewarm": False})
    return TTSService(config, engine=_Borrowed(engine))


_CASES = [
    ("zero_shot", {"prompt_text": "a short prompt transcript"}),
    ("cross_lingual", {}),
    ("preset", {"voice": "preset-a"}),
]


@needs_stack
@pytest.mark.parametrize(("mode", "extra"), _CASES)
def test_miss_then_hit_with_identical_audio(engine: Any, tmp_path: Path, mode: str, extra: dict[str, Any]) -> None:
    from lib.pipeline.service import synthesise_with_cache

    svc = _service(engine, tmp_path)
    fields: dict[str, Any] = {"mode": mode, "seed": 11, **extra}
    if "voice" not in extra:
        fields["prompt_audio"] = (16_000, prompt_pcm(seed=4))
    calls = engine_calls = svc.dashboard.snapshot(caller=LOCAL)["engine_calls"]
    first = synthesise_with_cache("Cache me if you can.", service=svc, **fields)
    second = synthesise_with_cache("Cache me if you can.", service=svc, **fields)
    assert (first.cache, second.cache) == ("MISS", "HIT")
    assert first.key == second.key
    assert np.array_equal(first.audio.pcm, second.audio.pcm) and first.sample_rate == 22_050
    engine_calls = svc.dashboard.snapshot(caller=LOCAL)["engine_calls"]
    assert engine_calls == calls + 1
    svc.close()


@needs_stack
def test_instruct_through_the_service(instruct_engine: Any, tmp_path: Path) -> None:
    from lib.pipeline.service import synthesise_with_cache

    svc = _service(instruct_engine, tmp_path)
    fields = {"voice": "preset-b", "style": "whispering", "mode": "instruct", "seed": 2}
    first = synthesise_with_cache("An instruction.", service=svc, **fields)
    second = synthesise_with_cache("An instruction.", service=svc, **fields)
    assert (first.cache, second.cache) == ("MISS", "HIT")
    assert np.array_equal(first.audio.pcm, second.audio.pcm)
    svc.close()


@needs_stack
def test_many_requests_in_one_voice_run_the_frontend_once(tiny_model: Path, tmp_path: Path) -> None:
    from lib.pipeline.service import synthesise_with_cache

    eng = make_engine(tiny_model, tmp_path)
    svc = _service(eng, tmp_path)
    prompt = (16_000, prompt_pcm(seed=6))
    texts = [f"Sentence number {n} in the same voice." for n in range(4)]
    results = [
        synthesise_with_cache(t, service=svc, prompt_audio=prompt, prompt_text="the words", seed=1) for t in texts
    ]
    assert [r.cache for r in results] == ["MISS"] * 4
    assert eng.frontend_runs == 1
    svc.close()
    # A new service (a restart) on the same cache directory reuses the persisted profile.
    svc2 = _service(eng, tmp_path)
    again = synthesise_with_cache("A fifth sentence.", service=svc2, prompt_audio=prompt, prompt_text="the words")
    assert again.cache == "MISS" and eng.frontend_runs == 1
    svc2.close()
    eng.close()


@needs_stack
def test_changed_model_file_changes_every_key(tiny_model: Path, tmp_path: Path) -> None:
    import torch

    copy = tmp_path / "CosyVoice-300M-tiny"
    shutil.copytree(tiny_model, copy)
    request: dict[str, Any] = {"text": "Same request, new model.", "voice": "preset-a", "seed": 1}
    from lib.request.types import TTSRequest

    old_engine = make_engine(copy, tmp_path)
    old = _service(old_engine, tmp_path / "a")
    old_key, old_tag = old.resolve(TTSRequest(**request)).key, old.tag
    old.close()
    old_engine.close()
    state = torch.load(copy / "flow.pt", weights_only=True)
    name = next(iter(state))
    state[name] = state[name] + 0.01
    torch.save(state, copy / "flow.pt")
    new_engine = make_engine(copy, tmp_path)
    new = _service(new_engine, tmp_path / "b")
    assert new_engine.model_version != old_engine.model_version
    assert new.tag != old_tag and new.tag == f"cosyvoice:{new_engine.model_version}"
    assert new.resolve(TTSRequest(**request)).key != old_key
    new.close()
    new_engine.close()


@needs_stack
def test_missing_model_dir_through_the_service_never_touches_the_network(tmp_path: Path) -> None:
    from lib.pipeline.service import TTSService

    config = load_config(overrides={"cache.dir": str(tmp_path / "c"), "engine": "cosyvoice",
                                    "cosyvoice.model_dir": str(tmp_path / "absent")})  # fmt: skip
    with no_network() as attempts, pytest.raises(EngineUnavailableError, match="does not exist"):
        TTSService(config)
    assert attempts == []


_CHILD = """
import json, sys, warnings
import numpy as np
warnings.simplefilter("ignore")
sys.path.insert(0, {root!r}); sys.path.insert(0, {tests!r})
from cosyvoice_fixture import prompt_pcm
from lib.config import load_config
from lib.pipeline.service import TTSService, synthesise_with_cache
config = load_config(overrides={{"cache.dir": {cache!r}, "engine": "cosyvoice", "voices.prewarm": False,
                                "cosyvoice.model_dir": {model!r}, "cosyvoice.device": "cpu",
                                "cosyvoice.fingerprint_file": {fp!r}}})
svc = TTSService(config)
out = {{}}
for mode, extra in {cases!r}:
    fields = dict(mode=mode, seed=5, **extra)
    if "voice" not in extra:
        fields["prompt_audio"] = (16000, prompt_pcm(seed=4))
    result = synthesise_with_cache("Two processes, one answer.", service=svc, **fields)
    np.save({outdir!r} + "/" + mode + ".npy", result.audio.pcm)
    out[mode] = result.key
print(json.dumps(out))
"""


@needs_stack
def test_same_request_gives_identical_audio_in_two_processes(engine: Any, tiny_model: Path, tmp_path: Path) -> None:
    from lib.pipeline.service import synthesise_with_cache

    script = _CHILD.format(
        root=str(ROOT),
        tests=str(ROOT / "tests"),
        cache=str(tmp_path / "child-cache"),
        model=str(tiny_model),
        fp=str(tmp_path / "fp.json"),
        cases=_CASES,
        outdir=str(tmp_path),
    )
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    child = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=240,
                           env=env)  # fmt: skip
    assert child.returncode == 0, child.stderr[-3000:]
    child_keys = json.loads(child.stdout.strip().splitlines()[-1])
    svc = _service(engine, tmp_path)
    for mode, extra in _CASES:
        fields: dict[str, Any] = {"mode": mode, "seed": 5, **extra}
        if "voice" not in extra:
            fields["prompt_audio"] = (16_000, prompt_pcm(seed=4))
        mine = synthesise_with_cache("Two processes, one answer.", service=svc, **fields)
        assert mine.cache == "MISS" and mine.key == child_keys[mode]
        assert np.array_equal(mine.audio.pcm, np.load(tmp_path / f"{mode}.npy")), mode
    svc.close()


def test_repo_dir_must_be_a_checkout(tmp_path: Path) -> None:
    from lib.engines.cosyvoice.runtime import load_runtime

    with pytest.raises(EngineUnavailableError, match="not a CosyVoice checkout"):
        load_runtime(str(tmp_path), "cpu")


_CHECKOUT_CHILD = """
import sys, warnings
import numpy as np
warnings.simplefilter("ignore")
sys.path.insert(0, {root!r})
from lib.config import CosyVoiceConfig
from lib.engines.cosyvoice import CosyVoiceEngine
engine = CosyVoiceEngine(CosyVoiceConfig(model_dir={model!r}, repo_dir={repo!r}, device="cpu",
                                         fingerprint_file={fp!r}))
import cosyvoice, matcha
assert engine._rt.source == "upstream", engine._rt.source
assert cosyvoice.__file__.startswith({repo!r}) and matcha.__file__.startswith({repo!r}), (cosyvoice, matcha)
voice = engine.extract_voice(np.load({prompt!r}), "words")
audio = engine.synthesise("From a checkout.", voice, style="", seed=2, speed=1.0, mode="zero_shot").audio
np.save({out!r}, audio)
"""


@needs_stack
def test_code_from_a_checkout_is_used_and_gives_the_same_audio(engine: Any, tiny_model: Path, tmp_path: Path) -> None:
    # A checkout's layout (cosyvoice/ at the top, Matcha-TTS under third_party/), made from
    # the installed code: proves repo_dir wins over the installed package and puts Matcha on
    # the path. Upstream's own frontend differences are not exercised by this.
    import cosyvoice
    import matcha

    repo = tmp_path / "CosyVoice"
    shutil.copytree(Path(cosyvoice.__file__).parent, repo / "cosyvoice")
    shutil.copytree(Path(matcha.__file__).parent, repo / "third_party" / "Matcha-TTS" / "matcha")
    np.save(tmp_path / "prompt.npy", prompt_pcm(seed=4))
    script = _CHECKOUT_CHILD.format(root=str(ROOT), model=str(tiny_model), repo=str(repo), fp=str(tmp_path / "fp.json"),
                                    prompt=str(tmp_path / "prompt.npy"), out=str(tmp_path / "audio.npy"))  # fmt: skip
    child = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=240,
                           env={**os.environ, "PYTHONWARNINGS": "ignore"})  # fmt: skip
    assert child.returncode == 0, child.stderr[-3000:]
    voice = engine.extract_voice(prompt_pcm(seed=4), "words")
    mine = engine.synthesise("From a checkout.", voice, style="", seed=2, speed=1.0, mode="zero_shot").audio
    assert np.array_equal(mine, np.load(tmp_path / "audio.npy"))


@needs_stack
def test_warm_upgrade_preloads_a_new_model_dir_beside_the_serving_one(tiny_model: Path, tmp_path: Path) -> None:
    """Issue 11 item 6 with real model directories: ``preload_cache.py --engine cosyvoice
    --model-dir NEW`` fills the cache the server uses while the server keeps its model;
    the server reports per model version how many hot phrases are ready; evicting the
    old version after the switch removes its entries."""
    import torch

    new_dir = tmp_path / "CosyVoice-300M-new"
    shutil.copytree(tiny_model, new_dir)
    state = torch.load(new_dir / "flow.pt", weights_only=True)
    name = next(iter(state))
    state[name] = state[name] + 0.01
    torch.save(state, new_dir / "flow.pt")
    phrases = tmp_path / "hot.json"
    phrases.write_text(json.dumps({
        "voices": {"a": "preset-a"},
        "phrases": [{"text": "Counter three is open.", "voice": "a"}, {"text": "Thank you.", "voice": "a"}],
    }), encoding="utf-8")  # fmt: skip
    cache = tmp_path / "cache"
    from lib.pipeline.service import TTSService

    config = load_config(env={}, overrides={
        "cache.dir": str(cache), "engine": "cosyvoice", "cosyvoice.model_dir": str(tiny_model),
        "cosyvoice.device": "cpu", "templates.file": str(phrases), "voices.prewarm": False,
        "cosyvoice.fingerprint_file": str(tmp_path / "fp.json"),
    })  # fmt: skip
    serving = TTSService(config, make_engine(tiny_model, tmp_path))
    try:
        # The script by its main, in this process (its own engine on the new directory).
        env = {"TTS_COSYVOICE_DEVICE": "cpu", "TTS_COSYVOICE_FINGERPRINT_FILE": str(tmp_path / "fp.json")}
        code, out, err = run_script("preload_cache", "--phrases", str(phrases), "--cache-dir", str(cache),
                                    "--engine", "cosyvoice", "--model-dir", str(new_dir), env=env)  # fmt: skip
        assert code == 0, err[-2000:]
        assert "preload: 2 phrases, 2 generated, 0 already cached, 0 failed" in out
        rows = {row["tag"]: row for row in serving.dashboard.snapshot(caller=LOCAL)["model_versions"]}
        new_tag = next(tag for tag in rows if tag != serving.tag)
        assert rows[serving.tag]["serving"] and rows[serving.tag]["hot_ready"] == 0
        assert (rows[new_tag]["hot_ready"], rows[new_tag]["hot_total"], rows[new_tag]["serving"]) == (2, 2, False)
        assert serving.admin.evict(new_tag, caller=LOCAL)["removed"] == 2  # e.g. the upgrade is called off
        serving.dashboard.readiness._answer = None  # type: ignore[union-attr]
        assert new_tag not in {row["tag"] for row in serving.dashboard.snapshot(caller=LOCAL)["model_versions"]}
    finally:
        serving.close()
