"""Broken audio never reaches a listener or the cache, whatever the engine (issue 31).

A runtime that computes wrongly on one CPU (onnxruntime's int8 convolution on AVX512-VNNI /
AMX machines) gave NaN, 1e30 spikes and 0.2 s clicks for ordinary sentences, and the
post-processing hid them. This machine may not have that CPU, so every check here injects
the fault: into the tone engine's output (the one production path), into Kokoro's raw model
output (checked before the trim), into the int8 kernels of the load-time check, and into the
cache (entries that an old runtime stored). The Kokoro cases are marked ``kokoro``.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest
from conftest import REPO

from lib.api import create_app
from lib.cache.entry import CachedAudio
from lib.config import BuiltinConfig, load_config
from lib.engines.builtin import BuiltinEngine
from lib.engines.builtin.kokoro import canary
from lib.engines.builtin.kokoro.install import find_install
from lib.engines.builtin.kokoro.model import KokoroModel, join_parts, loaded_graph
from lib.engines.builtin.kokoro.render import trim_edges
from lib.engines.builtin.kokoro.unsigned import signed_weights, unsigned_weights
from lib.engines.plausible import (
    PEAK_LIMIT,
    Bounds,
    InvalidAudioError,
    check_chunk,
    check_duration,
    check_result,
    implausible,
    units,
)
from lib.engines.probe import PROBE_TEXTS, probe
from lib.engines.tone import ToneEngine
from lib.errors import EngineUnavailableError
from lib.pipeline.service import TTSService
from lib.request.types import TTSRequest
from lib.text import read
from tests.api_server import LiveServer
from tests.test_kokoro import _engine as kokoro_engine

SENTENCE = "请不要把头和手伸出窗外。"  # 11 syllables: about 2.3 s said


def _config(tmp_path: Path, **overrides: Any) -> Any:
    values = {
        "engine": "tone", "cache.dir": str(tmp_path / "cache"), "voices.prewarm": False, "templates.file": None,
        "watchdog.probe_interval": 0, "readings.lexicon": str(tmp_path / "lexicon.json"), **overrides,
    }  # fmt: skip
    return load_config(env={}, overrides=values)


def _metric(exposition: str, name: str, **labels: str) -> float:
    want = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    found = re.search(rf"^{name}\{{{re.escape(want)}\}} (\S+)$", exposition, re.M)
    return float(found.group(1)) if found else 0.0


# --- the checks themselves ---------------------------------------------------------------


def test_chunks_must_be_finite_and_in_range() -> None:
    ok = 0.5 * np.sin(np.linspace(0, 200, 24_000)).astype(np.float32)
    assert check_chunk(ok).size == ok.size
    for bad, reason in ((np.float32("nan"), "non_finite"), (np.float32("inf"), "non_finite"), (1e30, "peak")):
        x = ok.copy()
        x[-5] = bad
        with pytest.raises(InvalidAudioError) as caught:
            check_chunk(x)
        assert caught.value.reason == reason and caught.value.http_status == 503
        assert "the engine produced invalid audio" in str(caught.value)
    x = ok.copy()
    x[3] = PEAK_LIMIT * 1.01
    with pytest.raises(InvalidAudioError, match="peaks at"):
        check_chunk(x)


def test_duration_bounds_come_from_the_reading() -> None:
    """An 11-syllable sentence: 0.22 s (the click a broken runtime gave) is refused, 2.3 s is
    fine at speed 1, and speed 4 and 0.25 move the bounds; a run-on minute is refused too."""
    syllables = units(read(SENTENCE).tokens)
    assert syllables == Bounds(11, 11)
    check_duration(2.3, syllables, 1.0)
    check_duration(2.3 / 4, syllables, 4.0)
    check_duration(2.3 * 4, syllables, 0.25)
    with pytest.raises(InvalidAudioError) as short:
        check_duration(0.22, syllables, 1.0)
    assert short.value.reason == "too_short"
    with pytest.raises(InvalidAudioError) as long:
        check_duration(60.0, syllables, 1.0)
    assert long.value.reason == "too_long"
    english = units(read("Welcome back, the train is now arriving.").tokens)
    assert 8 <= english.low <= 11 <= english.high


def test_whole_results_silent_or_empty_are_refused() -> None:
    for audio, reason in ((np.zeros(0, np.float32), "empty"), (np.zeros(48_000, np.float32), "silent")):
        with pytest.raises(InvalidAudioError) as caught:
            check_result(audio, 24_000, read(SENTENCE), 1.0)
        assert caught.value.reason == reason


def test_trim_does_not_hinge_on_the_loudest_frame() -> None:
    """Speech, then one huge spike in the silence after it: the speech stays. (Trimming at
    -40 dB under the loudest frame kept only the spike: a 0.2 s click that was cached.)"""
    rate = 24_000
    rng = np.random.default_rng(0)
    speech = 0.3 * rng.standard_normal(rate)  # 1 s of "speech"
    x = np.concatenate([np.zeros(rate // 2), speech, np.zeros(rate)])
    x[int(2.2 * rate)] = 1e6
    out = trim_edges(x, rate)
    assert out.size >= speech.size
    assert np.allclose(out[np.argmax(np.abs(out) > 0) :][: speech.size], speech)


# --- the one production path, on the tone engine -----------------------------------------


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[ToneEngine, TTSService, httpx.Client]]:
    engine = ToneEngine()
    svc = TTSService(_config(tmp_path), engine)
    try:
        with LiveServer(create_app(svc)) as live, httpx.Client(base_url=live.url, timeout=60) as http:
            yield engine, svc, http
    finally:
        svc.close()


@pytest.mark.parametrize(
    ("fault", "reason"),
    [("nan", "non_finite"), ("spike", "peak"), ("click", "too_short"), ("silence", "silent")],
)
def test_invalid_audio_is_a_503_and_nothing_is_cached(
    served: tuple[ToneEngine, TTSService, httpx.Client], fault: str, reason: str
) -> None:
    engine, svc, http = served
    rate = engine.sample_rate
    good = (0.3 * np.sin(np.arange(int(2.5 * rate)) * 0.05)).astype(np.float32)
    bad = {
        "nan": np.where(np.arange(good.size) > good.size - 100, np.float32("nan"), good).astype(np.float32),
        "spike": np.concatenate([np.zeros(good.size - 1, np.float32), np.float32([1e30])]),
        "click": good[: int(0.22 * rate)],
        "silence": np.zeros(good.size, np.float32),
    }[fault]
    engine.output_override = bad
    form = {"text": SENTENCE, "voice": "tone-low"}
    for _ in range(2):  # refused twice: the first one was not cached
        answer = http.post("/api/tts", data=form)
        assert answer.status_code == 503, answer.text
        assert "the engine produced invalid audio" in answer.json()["error"]
    assert engine.calls == 2
    assert svc.cache.store.stats()["entries"] == 0
    try:  # a stream refused at once is a 503; one already started is cut off. Never stored.
        streamed = http.post("/api/tts", data={**form, "stream": "true"})
        assert streamed.status_code == 503
    except httpx.RemoteProtocolError:
        pass
    assert svc.cache.store.stats()["entries"] == 0
    assert _metric(http.get("/metrics").text, "tts_engine_invalid_audio_total", engine="tone", reason=reason) >= 2
    engine.output_override = None
    fine = http.post("/api/tts", data=form)
    assert fine.status_code == 200 and fine.headers["X-Cache"] == "MISS"
    assert http.post("/api/tts", data=form).headers["X-Cache"] == "HIT"


def test_the_probe_speaks_a_sentence_per_language_and_says_why_it_failed(tmp_path: Path) -> None:
    engine = ToneEngine()
    svc = TTSService(_config(tmp_path), engine)
    try:
        found = probe(svc.watchdog)
        assert found["ok"], found
        spoken = [r.spoken for r in engine.readings[-2:]]
        assert len(PROBE_TEXTS) == 2 and all(len(t) > 10 for t in PROBE_TEXTS.values())
        assert "请在黄线外排队等候" in spoken[0] and "yellow line" in spoken[1]
        engine.output_override = np.full(2400, 0.2, np.float32)  # 0.1 s for a sentence
        found = probe(svc.watchdog)
        assert not found["ok"] and found["error"].startswith("zh: the engine produced invalid audio")
        health = svc.dashboard.health()
        assert health["status"] == "degraded"
        assert any("probe synthesis failed" in reason for reason in health["reasons"])
    finally:
        svc.close()


def test_verify_removes_entries_whose_audio_cannot_be_their_text(tmp_path: Path) -> None:
    """Entries an old runtime stored (a click for a sentence, silence) are removed by
    ``POST /api/cache/verify``; a good entry and one without text stay."""
    svc = TTSService(_config(tmp_path), ToneEngine())
    try:
        rate = 24_000
        speech = (8000 * np.sin(np.arange(int(2.4 * rate)) * 0.05)).astype(np.int16)
        entries = {
            "a" * 32: (speech, {"text": SENTENCE}),
            "b" * 32: (speech[: int(0.22 * rate)], {"text": SENTENCE}),
            "c" * 32: (np.zeros(rate, np.int16), {"text": "OK."}),
            "d" * 32: (speech[: int(0.22 * rate)], {}),
        }
        for key, (pcm, meta) in entries.items():
            assert svc.cache.store.put(CachedAudio.from_pcm(key, pcm, rate, meta), tag="t", ttl=None)
        assert implausible(speech[: int(0.22 * rate)], rate, {"text": SENTENCE}, read) == "too_short"
        assert implausible(speech[: int(0.22 * rate)], rate, {"text": SENTENCE, "speed": 4.0}, read) is None
        with LiveServer(create_app(svc)) as live, httpx.Client(base_url=live.url, timeout=60) as http:
            report = http.post("/api/cache/verify").json()
        assert report["checked"] == 4 and report["implausible_removed"] == 2 and report["corrupt_removed"] == 0
        assert svc.cache.store.get("a" * 32) is not None and svc.cache.store.get("d" * 32) is not None
        assert svc.cache.store.get("b" * 32) is None and svc.cache.store.get("c" * 32) is None
    finally:
        svc.close()


# --- the Kokoro base: its raw output and the load-time check -----------------------------


@pytest.fixture(scope="module")
def kokoro() -> Iterator[BuiltinEngine]:
    engine = kokoro_engine()
    engine.warm()
    assert engine.health_problems() == []
    yield engine
    engine.close()


def _faulty(fault: str) -> Any:
    real = KokoroModel.run

    def run(self: KokoroModel, ids: list[int], style: Any, speed: float) -> Any:
        out = np.array(real(self, ids, style, speed))
        if fault == "nan":
            out[-out.size // 4 :] = np.nan
        elif fault == "spike":  # the model's silence and one finite spike: what a trim kept
            out[:] = 0.0
            out[out.size // 2] = 3e30
        elif fault == "quiet":
            out[:] = 0.0
        return out

    return run


@pytest.mark.kokoro
@pytest.mark.parametrize(("fault", "reason"), [("nan", "non_finite"), ("spike", "peak"), ("quiet", "silent")])
def test_kokoro_output_is_checked_before_the_trim(
    kokoro: BuiltinEngine, monkeypatch: pytest.MonkeyPatch, fault: str, reason: str
) -> None:
    monkeypatch.setattr(KokoroModel, "run", _faulty(fault))
    with pytest.raises(InvalidAudioError) as caught:
        kokoro.synthesise("谢谢。" + SENTENCE, kokoro.preset_voice("zh-female"), style="", seed=0, speed=1.0,
                          mode="preset")  # fmt: skip
    assert caught.value.reason == reason


@pytest.mark.kokoro
def test_a_sentence_cut_short_is_refused_not_dropped(kokoro: BuiltinEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """The model gives 0.25 s of sound for each piece of a sentence: refused for its length."""
    real = KokoroModel.run
    kokoro.warm()  # the load-time check speaks with the real model

    def cut(self: KokoroModel, ids: list[int], style: Any, speed: float) -> Any:
        out = np.array(real(self, ids, style, speed))
        return out[: int(0.25 * 24_000)] if len(ids) > 10 else out

    monkeypatch.setattr(KokoroModel, "run", cut)
    with pytest.raises(InvalidAudioError) as caught:
        kokoro.synthesise("谢谢。" + SENTENCE, kokoro.preset_voice("zh-female"), style="", seed=0, speed=1.0,
                          mode="preset")  # fmt: skip
    assert caught.value.reason == "too_short" and "sentence" in str(caught.value)


def _broken_kernels(session: Any, feeds: dict[str, Any]) -> Any:
    """onnxruntime as it was on AVX512-VNNI/AMX CPUs: wrong last steps at lengths 17-31 mod 32."""
    out = np.array(session.run(None, feeds)[0])
    length = out.shape[-1] if out.ndim == 3 else out.shape[0]
    if 17 <= length % 32 <= 31:
        if out.ndim == 3:
            out[..., -1] = 2_000_000_000
        else:
            out[-1] = 2_000_000_000
    return out


def test_the_kernel_check_finds_a_broken_runtime() -> None:
    assert canary.check_kernels(1) is None  # this machine's runtime is right
    problem = canary.check_kernels(2, run=_broken_kernels)
    assert problem is not None and "computes int8 arithmetic wrongly" in problem
    assert "ConvInteger" in problem and "lengths 17, 18" in problem


@pytest.mark.kokoro
def test_a_broken_runtime_means_the_espeak_base_and_healthz_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    real = canary.check_kernels
    monkeypatch.setattr("lib.engines.builtin.check_kernels", lambda threads: real(threads, run=_broken_kernels))
    engine = BuiltinEngine(BuiltinConfig(base="kokoro"))
    assert engine.base == "espeak" and engine.sample_rate == 22_050 and "kokoro" not in engine.model_version
    assert any("espeak base serves" in r.getMessage() for r in caplog.records)
    svc = TTSService(_config(tmp_path, engine="builtin"), engine)
    try:
        health = svc.dashboard.health()
        assert health["status"] == "degraded"
        assert any("espeak base serves" in reason and "int8" in reason for reason in health["reasons"])
        result = svc.synthesise(TTSRequest(text=SENTENCE, voice="zh-female"))
        assert result.audio.meta["info"]["base"] == "espeak"
    finally:
        svc.close()


@pytest.mark.kokoro
def test_a_model_that_fails_its_check_at_load_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The load-time check speaks the canary texts; NaN from the model: the base refuses
    (503, nothing cached) and /healthz says why."""
    monkeypatch.setattr(KokoroModel, "run", _faulty("nan"))
    engine = kokoro_engine(threads=1)
    svc = TTSService(_config(tmp_path, engine="builtin"), engine)
    try:
        with pytest.raises(EngineUnavailableError, match="failed its check at load"):
            svc.synthesise(TTSRequest(text=SENTENCE, voice="zh-female"))
        health = svc.dashboard.health()
        assert health["status"] == "degraded"
        assert any("failed its check at load" in reason and "NaN" in reason for reason in health["reasons"])
        assert svc.cache.store.stats()["entries"] == 0
    finally:
        svc.close()


_COUNTING_LOADS = """
import sys
sys.path.insert(0, {repo!r})
from lib.engines.builtin.kokoro.model import KokoroModel
loads = []
real = KokoroModel.load
KokoroModel.load = lambda self: (loads.append(1), real(self))[1]
import preload_cache
code = preload_cache.main({args!r})
print("model loads:", len(loads))
sys.exit(code)
"""


@pytest.mark.kokoro
@pytest.mark.slow
def test_an_all_cached_preload_exits_cleanly_every_time(tmp_path: Path) -> None:
    """A preload that finds everything cached never loads the model (counted in the second
    run), so it exits 0 (onnxruntime building a session in a background thread at exit
    aborted with 134, now and then: hence the plain first run's exit is checked too)."""
    phrases = tmp_path / "phrases.json"
    listed = {"version": 1, "voices": {"zh": {"preset": "zh-female"}, "en": {"preset": "en-female"}},
              "phrases": [{"text": "谢谢。", "voice": "zh"}, {"text": "OK.", "voice": "en"}]}  # fmt: skip
    phrases.write_text(json.dumps(listed), encoding="utf-8")
    args = ["--phrases", str(phrases), "--cache-dir", str(tmp_path / "c")]
    env = {**os.environ, "TTS_READINGS_LEXICON": str(tmp_path / "lexicon.json")}
    first = subprocess.run([sys.executable, "preload_cache.py", *args], capture_output=True, text=True, cwd=REPO,
                           timeout=600, env=env)  # fmt: skip
    assert first.returncode == 0, first.stderr[-2000:]
    assert "2 generated" in first.stdout
    counting = _COUNTING_LOADS.format(repo=str(REPO), args=args)
    again = subprocess.run([sys.executable, "-c", counting], capture_output=True, text=True, cwd=REPO, timeout=600,
                           env=env)  # fmt: skip
    assert again.returncode == 0, again.stderr[-2000:]
    assert "2 already cached, 0 failed" in again.stdout
    assert "model loads: 0" in again.stdout


def _saturating_matmul(zero_point: bool) -> tuple[bytes, np.ndarray, int]:
    """A one-node MatMulInteger with signed weights in +-127 (u8 x s8 pairs beyond 16 bits:
    AVX2's ``vpmaddubsw`` saturates them), with or without a weight zero point."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    w = rng.integers(-127, 128, size=(512, 64)).astype(np.int8)
    wz = 5 if zero_point else 0
    inputs = ["x", "w", "xz", "wz"] if zero_point else ["x", "w", "xz"]
    inits = [numpy_helper.from_array(w, "w")]
    if zero_point:
        inits.append(numpy_helper.from_array(np.array(wz, dtype=np.int8), "wz"))
    graph = helper.make_graph(
        [helper.make_node("MatMulInteger", inputs, ["y"])], "saturating",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, [None, 512]),
         helper.make_tensor_value_info("xz", TensorProto.UINT8, [])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)], inits,
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model.SerializeToString(), w, wz


@pytest.mark.parametrize("zero_point", [True, False], ids=["zero-point", "no-zero-point"])
def test_signed_weights_made_unsigned_give_exact_products_on_this_cpu(zero_point: bool) -> None:
    """Kokoro's u8 x s8 products saturate on AVX2 CPUs; the loader makes its weights
    unsigned (the same integers), whose products are exact: checked here at every length
    with activations that saturate an AVX2 u8 x s8 kernel, against exact arithmetic."""
    import onnx

    data, w, wz = _saturating_matmul(zero_point)
    rewritten = unsigned_weights(data)
    assert signed_weights(onnx.load_from_string(data)) and not signed_weights(onnx.load_from_string(rewritten))
    session = canary._session(rewritten, 1)
    rng = np.random.default_rng(4)
    for length in canary.LENGTHS:
        x = rng.integers(0, 256, size=(length, 512)).astype(np.uint8)
        xz = int(rng.integers(0, 256))
        got = session.run(None, {"x": x, "xz": np.array(xz, dtype=np.uint8)})[0]
        want = (x.astype(np.float64) - xz) @ (w.astype(np.float64) - wz)
        assert np.array_equal(got.astype(np.float64), want), f"length {length}"


@pytest.mark.kokoro
def test_the_loaded_kokoro_graph_has_only_unsigned_weights_with_the_same_integers() -> None:
    """What the model loader gives onnxruntime: no signed weight left, every rewritten one
    the same integer (w + 128 with zero point z + 128)."""
    import onnx
    from onnx import numpy_helper

    install, missing = find_install()
    if install is None:
        pytest.skip(f"the Kokoro base is not installed: {missing}")
    original = onnx.load_from_string(join_parts(install.parts))
    signed = signed_weights(original)
    assert len(signed) > 100  # the export's MatMulInteger and LSTM weights and their zero points
    loaded = onnx.load_from_string(loaded_graph(install.parts))
    assert not signed_weights(loaded)
    before = {t.name: t for t in original.graph.initializer}
    after = {t.name: t for t in loaded.graph.initializer}
    for name in signed:
        old = numpy_helper.to_array(before[name]).astype(np.int16)
        new = numpy_helper.to_array(after[name])
        assert new.dtype == np.uint8 and np.array_equal(new.astype(np.int16) - 128, old), name
