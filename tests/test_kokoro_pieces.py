"""Sub-sentence streaming on the Kokoro base: a sentence made in pieces that a listener does
not notice, the first short, and the stream exactly the cached whole.

The pieces' policy is checked on phonemes (no model); the joins on the real model against
the same sentence said in one call: no added silence, no click, the level continuous;
the service's stream sends one chunk per piece and replays as a HIT with the same samples.
Marked ``kokoro``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from lib.config import load_config
from lib.engines.builtin import BuiltinEngine
from lib.engines.builtin.kokoro.phonemes import FIRST_IDS, MAX_IDS, MIN_PIECE_IDS, Sentence, pieces
from lib.engines.builtin.kokoro.render import FADE, LEAD, TIGHT, trim_edges
from lib.engines.builtin.kokoro.vocab import to_ids
from lib.pipeline.service import TTSService
from lib.request.types import TTSRequest
from lib.text import read
from tests.test_kokoro import _engine

pytestmark = pytest.mark.kokoro

ZH = "本次列车终点站是上海虹桥站，下车的乘客请做好准备。"
EN = "Attention please, the store will close in fifteen minutes, please bring your purchases to the checkout."
RATE = 24_000
FRAME = int(0.01 * RATE)


@pytest.fixture(scope="module")
def engine() -> Iterator[BuiltinEngine]:
    eng = _engine()
    yield eng
    eng.close()


def _sentence(engine: BuiltinEngine, text: str) -> Sentence:
    assert engine._kokoro is not None
    (sentence,) = engine._kokoro.sentences(read(text))
    return sentence


# -- the policy --------------------------------------------------------------------------


def test_a_short_sentence_is_one_piece_and_a_long_one_starts_short() -> None:
    words = ["wˈɛlkʌm", "bˈæk,", "ðə", "tɹˈAn", "ɪz", "nˈW", "əɹɹˈIvɪŋ."]
    assert pieces(words) == [" ".join(words)]  # 39 ids <= WHOLE_IDS
    long = words[:-1] + ["əɹɹˈIvɪŋ,"] + ["plˈiz", "stˈænd", "bɪhˈInd", "ðə", "jˈɛloʊ", "lˈIn,"] * 3
    long[-1] = "lˈIn."
    got = pieces(long)
    sizes = [len(to_ids(p)) for p in got]
    assert len(got) >= 3 and sizes[0] <= FIRST_IDS < sum(sizes)
    assert " ".join(got) == " ".join(long)  # every word once, in order
    budget = FIRST_IDS
    for size in sizes:  # each at most twice the budget before it
        assert MIN_PIECE_IDS <= size <= min(budget, MAX_IDS)
        budget = min(MAX_IDS, budget * 2)


def test_a_piece_is_not_cut_inside_a_code(engine: BuiltinEngine) -> None:
    """G4512 and A001 (a letter, then a number read digit by digit) and their measure word
    stay in one piece."""
    for text, code in (("各位旅客请注意，由北京南开往上海虹桥的G4512次列车现在开始检票。", "ʤˈi sɨ↘u↓jau→ɚ↘ ʦʰɨ↘"),
                       ("请A001号顾客到3号窗口办理业务，谢谢。", "ˈA li↗ŋli↗ŋjau→ xau↘")):  # fmt: skip
        sentence = _sentence(engine, text)
        assert len(sentence.chunks) >= 2
        assert any(code in chunk for chunk in sentence.chunks), sentence.chunks


# -- the joins, heard -------------------------------------------------------------------------


def _levels(x: np.ndarray) -> np.ndarray:
    n = x.size // FRAME
    return np.sqrt(np.mean(x[: n * FRAME].astype(np.float64).reshape(n, FRAME) ** 2, axis=1))


def _quiet_run(x: np.ndarray, level: float, start: int, end: int) -> float:
    """Seconds of the longest run of 10 ms frames below -30 dB of ``level`` in [start, end)."""
    rms = _levels(x[max(start, 0) : end])
    longest = run = 0
    for quiet in rms < level * 0.03:
        run = run + 1 if quiet else 0
        longest = max(longest, run)
    return longest * FRAME / RATE


def _longest_pause(x: np.ndarray) -> float:
    level = float(np.percentile(_levels(x), 90))
    return _quiet_run(x, level, 0, x.size)


@pytest.mark.parametrize(("text", "voice"), [(ZH, "zh-female"), (EN, "en-female")], ids=["zh", "en"])
def test_pieces_join_without_added_silence_clicks_or_level_jumps(engine: BuiltinEngine, text: str, voice: str) -> None:
    sentence = _sentence(engine, text)
    assert len(sentence.chunks) >= 3 and len(to_ids(sentence.chunks[0])) <= FIRST_IDS
    profile = engine.preset_voice(voice)
    chunks = [np.asarray(c) for c in engine.stream(text, profile, style="", seed=0, speed=1.0, mode="preset")]
    assert len(chunks) == len(sentence.chunks)  # one chunk per piece, sent as it is made
    whole = np.concatenate(chunks)  # what synthesise gives: the service test below checks it
    # The same sentence said in one call, as before pieces.
    assert engine._kokoro is not None
    one = Sentence((" ".join(sentence.chunks),), sentence.language, sentence.syllables)
    reference, _ = engine._kokoro.say(one, str(profile.params["kokoro"]), 1.0)
    assert whole.size <= 1.2 * reference.size  # (a piece's last word is said a little longer)
    natural = _longest_pause(reference)
    level = float(np.percentile(_levels(whole), 90))
    joins = np.cumsum([c.size for c in chunks])[:-1]
    window = int(0.3 * RATE)
    for j in joins:
        # No added silence: the pause at a join is no longer than the sentence's longest
        # pause when said in one call.
        assert _quiet_run(whole, level, j - window, j + window) <= natural + 0.03, (j / RATE, natural)
        # No click: the step across the join is no larger than the steps around it.
        around = np.abs(np.diff(whole[j - FRAME : j + FRAME].astype(np.float64)))
        assert abs(float(whole[j]) - float(whole[j - 1])) <= max(float(np.percentile(around, 99)), 1e-4)
        # The level continuous: the speech just before and just after within 6 dB.
        before = float(np.percentile(_levels(whole[max(j - RATE, 0) : j]), 90))
        after = float(np.percentile(_levels(whole[j : j + RATE]), 90))
        assert abs(20 * np.log10(after / before)) <= 6.0, (j / RATE, before, after)


def test_a_level_jump_at_a_join_is_caught(engine: BuiltinEngine, monkeypatch: pytest.MonkeyPatch) -> None:
    """The level check above can fail: the second piece 12 dB down is seen."""
    from lib.engines.builtin import kokoro as kokoro_pkg

    real = kokoro_pkg.render.KokoroBase.pieces

    def quieter(self: Any, *args: Any, **kwargs: Any) -> Iterator[tuple[np.ndarray, float]]:
        for i, (audio, gap) in enumerate(real(self, *args, **kwargs)):
            yield (audio * 0.25 if i == 1 else audio), gap

    monkeypatch.setattr(kokoro_pkg.render.KokoroBase, "pieces", quieter)
    with pytest.raises(AssertionError, match=r"0\."):
        test_pieces_join_without_added_silence_clicks_or_level_jumps(engine, ZH, "zh-female")


# -- through the service: streamed, stored, replayed -------------------------------------------


def test_a_streamed_miss_is_heard_before_its_later_pieces_are_made_and_replays_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the service: the client has the first piece's audio before the engine makes
    the second (the model is held until then); the replay is a HIT with the same samples."""
    from lib.engines.builtin.kokoro import render

    config = load_config(env={}, overrides={
        "engine": "builtin", "builtin.base": "kokoro", "cache.dir": str(tmp_path / "cache"), "voices.prewarm": False,
        "templates.file": None, "watchdog.probe_interval": 0, "readings.lexicon": str(tmp_path / "lexicon.json"),
    })  # fmt: skip
    heard = threading.Event()
    waited: list[bool] = []
    real = render.KokoroBase.pieces

    def held(self: Any, sentence: Sentence, *args: Any, **kwargs: Any) -> Iterator[tuple[np.ndarray, float]]:
        made = real(self, sentence, *args, **kwargs)
        yield next(made)
        if len(sentence.chunks) > 1:
            waited.append(heard.wait(60))  # the next piece only once the client has the first
        yield from made

    engine = _engine()
    engine.warm()  # the load-time check speaks too: not held
    monkeypatch.setattr(render.KokoroBase, "pieces", held)
    # The same engine (its check at load is not run twice) behind a fresh cache: the request
    # made there without streaming.
    fresh = TTSService(config.replace({"cache.dir": str(tmp_path / "fresh")}), engine)
    svc = TTSService(config, engine)
    try:
        request = TTSRequest(text=EN, voice="en-female")
        answer = svc.stream(request)
        assert answer.cache == "MISS"
        chunks = []
        for chunk in answer.chunks:
            chunks.append(np.asarray(chunk))
            heard.set()
        assert waited and all(waited)  # every later piece was made after the client had audio
        svc.settle(60)
        again = svc.stream(request)
        assert again.cache == "HIT"
        assert np.array_equal(np.concatenate(list(again.chunks)), np.concatenate(chunks))
        # Made without streaming: the same samples (the result is finished piece by piece
        # from the stored pieces: lib.compose.assemble.PieceFinisher).
        made = fresh.synthesise(request)
        assert made.cache == "MISS" and np.array_equal(made.audio.pcm, np.concatenate(chunks))
    finally:
        try:
            svc.close()
        finally:
            fresh.close()


def test_a_trimmed_piece_starts_and_ends_at_zero_whatever_the_noise_floor() -> None:
    """The kept edge silence is faded: a piece cut in the model's noise floor (-66 dBFS on
    an AVX-512 CPU, where the join test heard a 0.00047 step into the pause's zeros) starts
    and ends at zero, and the speech between is untouched."""
    rng = np.random.default_rng(0)
    floor = 0.0005 * rng.standard_normal(RATE)  # 1 s of noise floor (-66 dBFS)
    speech = 0.3 * np.sin(2 * np.pi * 220 * np.arange(RATE // 2) / RATE)
    audio = floor.copy()
    audio[RATE // 4 : RATE // 4 + speech.size] += speech
    kept = trim_edges(audio, lead=LEAD, tail=TIGHT)
    assert kept[0] == 0.0 and kept[-1] == 0.0
    assert np.all(np.abs(kept[:3]) < 1e-5) and np.all(np.abs(kept[-3:]) < 1e-5)  # a ramp, not one zeroed sample
    start = RATE // 4 - int(LEAD * RATE)  # where the kept lead begins (the speech's frame edge)
    fade = int(FADE * RATE)
    assert kept.size >= speech.size
    assert np.array_equal(kept[fade:-fade], audio[start + fade : start + kept.size - fade])
