"""A recording shorter than the 3 s the forms ask for, with too little speech, or mostly
silence gets a warning that says why and what to record (lib/audio/activity.py), where
the operator uploads it (the Synthesise tab's steps line) and when a voice is saved."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf

from lib.audio.activity import prompt_advice, speech_activity


def _read(path: Path) -> tuple[Any, int]:
    audio, rate = sf.read(path, dtype="float32")
    return (audio.mean(axis=1) if audio.ndim > 1 else audio), rate


@pytest.mark.parametrize("name", ["zh_female_prompt.wav", "male_prompt.wav"])
def test_real_prompts_pass_and_cut_or_padded_ones_are_warned(testdata_dir: Path, name: str) -> None:
    audio, rate = _read(testdata_dir / name)
    whole = speech_activity(audio, rate)
    assert 0.6 < whole.share <= 1.0 and whole.speech_seconds > 2.0  # pauses are not speech, words are
    assert prompt_advice(whole) == ""
    short = prompt_advice(speech_activity(audio[: int(1.5 * rate)], rate))
    assert "shorter than the 3 s asked for" in short and "短于所需的 3 秒" in short and "Record 3–10 s" in short
    hiss = np.random.default_rng(0).normal(0, 1e-4, rate * 15).astype(np.float32)  # a quiet room, not digital zero
    padded = speech_activity(np.concatenate([hiss, audio, hiss]), rate)
    assert abs(padded.speech_seconds - whole.speech_seconds) < 0.5  # the room is not counted as speech
    said = prompt_advice(padded)
    assert "mostly silence" in said and "大部分是静音" in said and "Trim the silence" in said


def test_a_long_recording_with_little_speech_says_how_much(testdata_dir: Path) -> None:
    audio, rate = _read(testdata_dir / "zh_female_prompt.wav")
    hiss = np.random.default_rng(1).normal(0, 1e-4, rate * 3).astype(np.float32)
    said = prompt_advice(speech_activity(np.concatenate([audio[: int(1.2 * rate)], hiss]), rate))
    assert "has only about 0.9 s of speech (4.2 s in all)" in said and "只有约 0.9 秒语音" in said


def test_the_operator_is_warned_at_upload_and_at_save(make_service: Any, testdata_dir: Path, tmp_path: Path) -> None:
    from lib.ui.handlers import Handlers

    service = make_service()
    h = Handlers(service, tmp_path / "hot.json")
    audio, rate = _read(testdata_dir / "zh_female_prompt.wav")
    cut = tmp_path / "cut.wav"
    sf.write(cut, audio[: int(1.5 * rate)], rate)
    whole = str(testdata_dir / "zh_female_prompt.wav")
    assert "shorter than the 3 s asked for" in h.form_note("zero_shot", str(cut), None, "", "")
    assert "⚠" not in h.form_note("zero_shot", whole, None, "", "")
    assert "⚠" not in h.form_note("preset", str(cut), "tone-low", "", "")  # a mode that does not use it
    tiny = tmp_path / "tiny.wav"
    sf.write(tiny, audio[: int(0.6 * rate)], rate)  # under prompt.min_seconds: warned at upload, not only refused
    assert "The recording is 0.6 s, shorter than the 3 s asked for" in h.form_note("zero_shot", str(tiny), None, "", "")

    saved = h.save_voice("short-one", str(cut), "", False, "", None)  # type: ignore[arg-type]
    assert "Saved the voice 'short-one'" in saved[-1] and "shorter than the 3 s asked for" in saved[-1]
