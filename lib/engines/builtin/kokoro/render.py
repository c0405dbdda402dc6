"""The Kokoro base: a reading's sentences spoken by a Kokoro voice, edges trimmed.

:class:`KokoroBase` is what :class:`lib.engines.builtin.BuiltinEngine` uses instead of
espeak-ng's audio when ``builtin.base`` is ``kokoro``. Per sentence
(:mod:`.phonemes`): each piece's phoneme ids go to the model with the voice's style row
for that length, at the requested speed (:meth:`KokoroBase.pieces`, one at a time, so that
a stream sends the first before the next is made); the model's own edge silence (about
0.4 s before the speech, 0.5-0.8 s after it) is cut. Where a piece ends at a comma, it
keeps :data:`TAIL` and the next :data:`LEAD`, with the clause's pause between
(:data:`CLAUSE_GAP`, by language: what the model leaves at a comma inside one call);
where it was cut between words, both keep only :data:`TIGHT`, so the join adds no
pause. Every sentence but the last gets a sentence pause (:data:`SENTENCE_GAP`). The
engine then matches the voice toward the prompt (:mod:`..convert`) and shapes the level
(peaks limited by a soft limiter).

Output stays at 24 kHz, the model's rate: resampling would cost time and add nothing, and
24 kHz is a rate every stored format takes (OGG/Opus refuses 22.05 kHz).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterator
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lib.engines.builtin import _world
from lib.engines.builtin.espeak import EspeakSynth
from lib.engines.builtin.kokoro.install import MODEL_SHA256, Install, versions
from lib.engines.builtin.kokoro.model import SAMPLE_RATE, shared_model
from lib.engines.builtin.kokoro.phonemes import Sentence, phonemise
from lib.engines.builtin.kokoro.vocab import to_ids
from lib.engines.builtin.kokoro.voices import VoicePacks
from lib.engines.plausible import InvalidAudioError, check_chunk
from lib.text.tokens import Reading

__all__ = [
    "BASE_VOICES", "CLAUSE_GAP", "LEAD", "SAMPLE_RATE", "SENTENCE_GAP", "TAIL", "TIGHT", "KokoroBase", "shift_pitch",
    "trim_edges",
]  # fmt: skip

_LOGGER = logging.getLogger(__name__)

#: Seconds of the model's own silence kept before and after the speech of a sentence.
LEAD, TAIL = 0.03, 0.08
#: ... and on both sides of a join between words (a piece cut for streaming).
TIGHT = 0.02
#: Silence added between pieces joined at a comma, by sentence language, so that the
#: pause (TAIL + gap + LEAD and the model's own fade) is the one the model makes at a
#: comma inside one call: measured 0.09-0.17 s in Mandarin and 0.29-0.35 s in English
#: (zf_xiaoxiao, af_heart; silence below -30 dB of the speech's level).
CLAUSE_GAP = {"zh": 0.0, "en": 0.19}
#: Pause after every sentence but the last.
SENTENCE_GAP = 0.3
#: The Kokoro voice a prompt voice is read in, by (sentence language, pitch class): a
#: fixed voice per class measured as good as the nearest or a blended voice once the
#: prompt's frames are matched on top (facts.md, "Kokoro-82M").
BASE_VOICES = {
    ("zh", "female"): "zf_xiaoxiao",
    ("zh", "male"): "zm_yunjian",
    ("en", "female"): "af_heart",
    ("en", "male"): "am_michael",
}
#: Frame RMS below this fraction of the speech's level (the 90th percentile of frame RMS)
#: is the model's silence (-40 dB). A percentile, not the loudest frame: one spike must
#: not decide where the speech is (a broken runtime's 1e30 spike once kept only itself).
_SILENCE = 0.01
_LEVEL_PERCENTILE = 90.0
#: Frames in a row above the threshold that mark the speech's first and last frame.
_RUN = 3
#: Seconds of the kept edge silence faded to zero at both ends: a cut in the model's
#: silence left its noise floor (-66 dBFS on one CPU, nothing on another) to step to the
#: digital silence of the pause after it, a click the join test heard on AVX-512.
FADE = 0.005
_FRAME = int(0.01 * SAMPLE_RATE)
_MIN_SPEED, _MAX_SPEED = 0.5, 2.0


def _edge(loud: NDArray[np.bool_]) -> int:
    """Index of the first frame that starts :data:`_RUN` loud frames in a row, or -1."""
    if loud.size < _RUN:
        return 0 if loud.all() and loud.size else -1
    runs = np.ones(loud.size - _RUN + 1, dtype=bool)
    for i in range(_RUN):
        runs &= loud[i : loud.size - _RUN + 1 + i]
    found = np.flatnonzero(runs)
    return int(found[0]) if found.size else -1


def trim_edges(audio: NDArray[Any], rate: int = SAMPLE_RATE, lead: float = LEAD, tail: float = TAIL) -> NDArray[Any]:
    """``audio`` without its edge silence, keeping ``lead`` / ``tail`` seconds of it, the
    first and last :data:`FADE` seconds of those faded in and out (so every piece starts
    and ends at zero, whatever the CPU's noise floor). Speech starts at the first of
    :data:`_RUN` frames in a row louder than -40 dB under the speech's level and ends at
    the last such run; audio with no such run is silence (empty result)."""
    x = np.asarray(audio, dtype=np.float64)
    n = x.size // _FRAME
    if n == 0:
        return x
    rms = np.sqrt(np.mean(x[: n * _FRAME].reshape(n, _FRAME) ** 2, axis=1))
    level = float(np.percentile(rms, _LEVEL_PERCENTILE))
    if level <= 0:
        return x[:0]
    loud = rms > level * _SILENCE
    first = _edge(loud)
    if first < 0:
        return x[:0]
    last = n - 1 - _edge(loud[::-1])
    start = max(first * _FRAME - int(lead * rate), 0)
    end = min((last + 1) * _FRAME + int(tail * rate), x.size)
    kept = x[start:end].copy()
    fade = min(int(FADE * rate), int(lead * rate), int(tail * rate), kept.size // 2)
    if fade > 0:
        ramp = 0.5 - 0.5 * np.cos(np.pi * np.arange(fade) / fade)  # 0 -> almost 1
        kept[:fade] *= ramp
        kept[-fade:] *= ramp[::-1]
    return kept


def shift_pitch(
    x: NDArray[Any], rate: int, semitones: float, range_factor: float, centre: float | None = None
) -> tuple[NDArray[Any], float | None]:
    """``x`` with its F0 moved by ``semitones`` and its log-F0 spread scaled by
    ``range_factor`` around ``centre`` (default: its own mean log-F0) (WORLD analysis and
    resynthesis; envelope and aperiodicity kept); and the centre used (None if ``x`` was
    too short or unvoiced to shift). For the style words of Kokoro preset voices, which
    have no frame pool to match; a sentence's later pieces take its first piece's centre."""
    if x.size < 2048:
        return x, centre
    f0, times = _world.f0_track(x, rate, 5.0)
    sp = _world.envelope(x, rate, f0, times)
    ap = _world.aperiodicity(x, rate, f0, times)
    voiced = f0 > 0
    if int(voiced.sum()) < 5:
        return x, centre
    log_f0 = np.log(f0[voiced])
    if centre is None:
        centre = float(log_f0.mean())
    new = np.zeros_like(f0)
    new[voiced] = np.exp(centre + (log_f0 - centre) * range_factor + semitones * np.log(2.0) / 12.0)
    step = _world.FFT_SIZE // _world.SYNTH_FFT_SIZE
    y = _world.synthesize(new, np.ascontiguousarray(sp[:, ::step]), np.ascontiguousarray(ap[:, ::step]), rate, 5.0)
    return y, centre


class KokoroBase:
    """Kokoro-82M with the voices of one install; the model is shared by the process."""

    sample_rate = SAMPLE_RATE

    def __init__(self, install: Install, espeak: EspeakSynth, *, threads: int = 0) -> None:
        self.model = shared_model(install.parts, threads)
        self.voices = VoicePacks(install.voices_dir, install.voices)
        self._espeak = espeak
        digest = hashlib.sha256("".join(f"{n}:{h}\n" for n, h in sorted(install.voices.items())).encode())
        parts = [f"kokoro-v1.0-int8-{MODEL_SHA256[:12]}", f"voices-{digest.hexdigest()[:12]}"]
        parts += [f"{name}-{version}" for name, version in versions().items()]
        self.version = "+".join(parts)

    def load(self) -> None:
        """Load and check the model now (the first synthesis would)."""
        self.model.load()

    def sentences(self, reading: Reading) -> list[Sentence]:
        """The reading in Kokoro phonemes, sentence by sentence (espeak-ng for English)."""
        return phonemise(reading, self._espeak.ipa)

    def pieces(self, sentence: Sentence, voice: str, speed: float) -> Iterator[tuple[NDArray[Any], float]]:
        """The sentence in voice ``voice``, piece by piece (:mod:`.phonemes`), each made
        when asked for: float64 audio at :data:`SAMPLE_RATE`, edges trimmed for its joins,
        and the seconds of silence that follow it within the sentence at the model's speed
        (a clause's pause; 0 after a cut between words and after the last)."""
        model_speed = float(np.clip(speed, _MIN_SPEED, _MAX_SPEED))
        count = len(sentence.chunks)
        after_comma = True  # the sentence's start is trimmed like a clause's
        for i, chunk in enumerate(sentence.chunks):
            ids = to_ids(chunk)
            audio = self.model.run(ids, self.voices.style(voice, len(ids)), model_speed)
            # Checked raw, before the trim could hide it (lib.engines.plausible).
            check_chunk(audio, "the Kokoro model's output")
            last = i == count - 1
            clause = chunk.endswith(",")
            trimmed = trim_edges(audio, lead=LEAD if after_comma else TIGHT, tail=TAIL if last or clause else TIGHT)
            if not trimmed.size:
                # A chunk of speakable phonemes came back silent: never dropped quietly.
                raise InvalidAudioError("silent", f"the Kokoro model's output for {len(ids)} phonemes is silent")
            gap = 0.0 if last or not clause else CLAUSE_GAP.get(sentence.language, CLAUSE_GAP["zh"]) / model_speed
            after_comma = clause
            yield trimmed, gap

    @staticmethod
    def residual(speed: float) -> float:
        """The duration factor still to apply after the model spoke at ``speed`` (it takes
        speeds 0.5-2)."""
        return float(np.clip(speed, _MIN_SPEED, _MAX_SPEED)) / speed

    def say(self, sentence: Sentence, voice: str, speed: float) -> tuple[NDArray[Any], float]:
        """One sentence in voice ``voice``: float64 audio at :data:`SAMPLE_RATE`, its
        pieces joined (:meth:`pieces`); and the duration factor still to apply (the model
        takes speeds 0.5-2)."""
        parts: list[NDArray[Any]] = []
        for audio, gap in self.pieces(sentence, voice, speed):
            parts += [audio, np.zeros(round(gap * SAMPLE_RATE))]
        return np.concatenate(parts), self.residual(speed)
