"""Style words that set a level survive loudness levelling: the target is the neutral
voice's level; "loud" is louder and "soft" softer by the builtin engine's energy factors
(x1.6 = +4.1 dB, x0.5 = -6.0 dB), peaks still limited to -1 dBFS. Only results in such a
style changed key (their recipe names the gain); every other key is the one it was."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from lib.compose.assemble import STYLE_LEVELS, Finish, style_level_db, to_float
from lib.compose.loudness import integrated_loudness
from lib.config import load_config
from lib.engines.builtin.style import parse_style
from lib.pipeline.service import TTSService
from lib.request.types import TTSRequest

TEXT = "请A023号顾客到3号窗口办理业务。"


@pytest.fixture(scope="module")
def builtin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TTSService]:
    cache = tmp_path_factory.mktemp("levels")
    overrides = {"cache.dir": str(cache), "engine": "builtin", "builtin.base": "espeak"}
    service = TTSService(load_config(env={}, overrides=overrides))
    yield service
    service.close()


def _measure(service: TTSService, style: str, text: str = TEXT) -> tuple[float, float, str]:
    mode = "instruct" if style else "preset"
    result = service.synthesise(TTSRequest(text=text, voice="zh-female", style=style, mode=mode))
    x = to_float(result.audio.pcm)
    return integrated_loudness(x, result.sample_rate), 20 * math.log10(float(np.abs(x).max())), result.key


def test_the_level_words_are_the_builtin_engines_energy() -> None:
    for words, factor in STYLE_LEVELS:
        for word in words:
            assert parse_style(word).energy == factor, word
            assert style_level_db(word) == round(20 * math.log10(factor), 2)
    assert style_level_db("LOUD and slow") == 4.08 and style_level_db("慢一点，轻声") == -6.02
    assert style_level_db("slow, calm") == 0.0 and style_level_db("aloud?") == 0.0  # whole English words only


@pytest.mark.parametrize("text", [TEXT, TEXT + "请到5号窗口。"])  # one unit, and two
def test_loud_is_louder_and_soft_softer_after_levelling(builtin: TTSService, text: str) -> None:
    neutral, neutral_peak, _ = _measure(builtin, "", text)
    loud, loud_peak, _ = _measure(builtin, "loud", text)
    soft, _, _ = _measure(builtin, "soft", text)
    assert abs(neutral - (-16.0)) < 0.5  # the target is the neutral voice's level
    assert 2.5 <= loud - neutral <= 4.1 + 0.3  # +4.1 dB asked, the limiter takes some back
    assert loud_peak <= -1.0 + 0.01 and neutral_peak <= -1.0 + 0.01  # never above the ceiling
    assert abs((soft - neutral) - (-6.02)) < 0.5
    assert _measure(builtin, "大声", text)[0] == pytest.approx(loud, abs=0.01)


def test_only_results_in_a_level_style_changed_key(builtin: TTSService) -> None:
    finish = Finish()
    assert finish.recipe_for("") == finish.recipe == finish.recipe_for("slow, 开心")  # those keys are as they were
    assert '"style_db":4.08' in finish.recipe_for("loud") and '"style_db":-6.02' in finish.recipe_for("soft")
    assert Finish(loudness=None).recipe_for("loud") == Finish(loudness=None).recipe  # no target: nothing undone
    plain = builtin.resolve(TTSRequest(text=TEXT, voice="zh-female"))
    assert plain.fields.finish == finish.recipe
    loud = builtin.resolve(TTSRequest(text=TEXT, voice="zh-female", style="loud", mode="instruct"))
    assert loud.fields.finish == finish.recipe_for("loud")


def test_the_key_of_a_neutral_result_is_pinned(tmp_path: Path) -> None:
    """The recipe text of results without a level style did not change (their keys and
    entries stay valid across this change)."""
    assert Finish().recipe == ('{"lufs":-16.0,"max":80,"pause":[0.3,0.15],"tail":0.2,"v":[1,1],"xf":0.01}')
