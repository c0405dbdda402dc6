"""How much of a recording is speech: what the forms warn about before a prompt is used.

A prompt of 1 s, or one of 8 s that is mostly room noise, clones badly (the voice
matching has few frames of the speaker to draw on), and the operator cannot hear why.
:func:`speech_activity` counts the 20 ms frames whose level is within 30 dB of the
recording's loud frames (and above -50 dBFS): the seconds of speech, whatever the
recording's gain. :func:`prompt_advice` turns that into a warning with what to record.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lib.audio import PROMPT_SAMPLE_RATE

__all__ = ["ASKED_SECONDS", "LEAST_SPEECH", "MOSTLY_SILENCE", "SpeechActivity", "prompt_advice", "speech_activity"]

ASKED_SECONDS = 3.0
"""The shortest recording the forms ask for (their labels say 3-10 s)."""
LEAST_SPEECH = 2.0
"""Less speech than this is too little to clone from, however long the recording (the
development prompts of 3.5-14 s hold 2.6-11.8 s: pauses between words are not speech)."""
MOSTLY_SILENCE = 0.5
"""A recording with less than this share of speech is mostly silence (the development
prompts: 0.65-0.98)."""

_FRAME = PROMPT_SAMPLE_RATE // 50  # 20 ms
_FLOOR_DB = -50.0
_BELOW_LOUD_DB = 30.0


@dataclass(frozen=True)
class SpeechActivity:
    seconds: float
    """The recording's length."""
    speech_seconds: float
    """Of which frames of speech (see the module)."""

    @property
    def share(self) -> float:
        return self.speech_seconds / self.seconds if self.seconds > 0 else 0.0


def speech_activity(pcm: NDArray[Any], rate: int = PROMPT_SAMPLE_RATE) -> SpeechActivity:
    """The speech in mono 16-bit ``pcm`` (or float in [-1, 1]) at ``rate``."""
    x = np.asarray(pcm, dtype=np.float64)
    if np.issubdtype(np.asarray(pcm).dtype, np.integer):
        x = x / 32768.0
    seconds = x.size / rate
    frame = max(1, rate // 50)
    n = x.size // frame
    if n == 0:
        return SpeechActivity(seconds, 0.0)
    frames = x[: n * frame].reshape(n, frame)
    level = 10.0 * np.log10(np.mean(frames * frames, axis=1) + 1e-12)
    loud = float(np.percentile(level, 95))
    active = level > max(_FLOOR_DB, loud - _BELOW_LOUD_DB)
    return SpeechActivity(round(seconds, 2), round(float(active.sum()) * frame / rate, 2))


def prompt_advice(activity: SpeechActivity, asked: float = ASKED_SECONDS) -> str:
    """A warning, in both languages, when a recording has less speech than asked for or
    is mostly silence: why, and what to record; "" when it is fine."""
    speech, seconds = activity.speech_seconds, activity.seconds
    if seconds < asked or speech < LEAST_SPEECH:
        short = (
            f"录音只有 {seconds:.1f} 秒，短于所需的 {asked:g} 秒" if seconds < asked
            else f"录音中只有约 {speech:.1f} 秒语音（共 {seconds:.1f} 秒）"
        )  # fmt: skip
        said = (
            f"The recording is {seconds:.1f} s, shorter than the {asked:g} s asked for" if seconds < asked
            else f"The recording has only about {speech:.1f} s of speech ({seconds:.1f} s in all)"
        )  # fmt: skip
        return (
            f"⚠ {short}：克隆的声音会不像本人。请录制 {asked:g}–10 秒、只有一个人清楚说话的录音。 {said}: the clone "
            f"will sound less like the speaker. Record {asked:g}–10 s of one person speaking clearly."
        )
    if activity.share < MOSTLY_SILENCE:
        return (
            f"⚠ 录音大部分是静音：{seconds:.1f} 秒中只有约 {speech:.1f} 秒语音。请剪掉静音，或靠近麦克风重新录制。"
            f" The recording is mostly silence: about {speech:.1f} s of speech in {seconds:.1f} s. Trim the silence "
            "or record again closer to the microphone."
        )
    return ""
