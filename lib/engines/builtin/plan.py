"""Per-request prosody decisions of the builtin engine, shared by all sentences of a request.

The request's seed draws a speaking-rate factor (about +-3 %) and a pitch offset (about
+-0.4 semitone); the style adds its rate, pitch, range and energy. Then, per base:

- espeak: an espeak rate in words per minute (the residual that integer wpm cannot hit
  is applied by the resynthesis), and per run of text an espeak pitch and range offset
  drawn from the generator, which varies the contour from phrase to phrase;
- kokoro: the model's speed; for a prompt voice the pitch offset and range go into the
  frame transfer, for a Kokoro preset voice the style's pitch and range (not the seed's
  offset: a WORLD resynthesis of every preset request would cost clarity for a 0.4
  semitone variation nobody asked for) are applied by a WORLD pitch shift.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lib.engines.builtin.convert import Anchor, Prosody, transfer_piece
from lib.engines.builtin.espeak import EspeakParams
from lib.engines.builtin.kokoro.render import BASE_VOICES, shift_pitch
from lib.engines.builtin.matching import change_duration
from lib.engines.builtin.pool import FramePool
from lib.engines.builtin.style import StyleEffect

__all__ = ["Plan", "voice_name"]

_LOGGER = logging.getLogger(__name__)

_BASE_WPM = 175
_MIN_WPM, _MAX_WPM = 80, 450
#: Below this rate residual a preset's audio is used as it is (a resynthesis would
#: change the voice for an inaudible 0.3 % of duration from rounding the rate).
_PRESET_STRETCH_TOLERANCE = 0.02
#: DIO's decimation when analysing the base's audio for the transfer: espeak's clean
#: pulses allow 2 (faster); Kokoro's audio is analysed at full rate. Measured on the TUNE
#: voices of bench/bench_voice.py (Kokoro, 1 seed): 2 gave similarity 0.728, split
#: identification 3/5, English WER 0.365; 1 gave 0.727, 4/5, 0.339.
_DIO_SPEED = {"espeak": 2, "kokoro": 1}
#: Whether unvoiced frames are matched too, or the base's own consonants kept. Kokoro's
#: consonants are clear and carry little of the speaker: keeping them (TUNE voices, dio 1)
#: took English WER from 0.339 to 0.270 (English prompts 0.286 to 0.141) for similarity
#: 0.727 to 0.723 and split identification 4/5 to 3/5 (split similarity 0.674 to 0.671).
_MATCH_UNVOICED = {"espeak": True, "kokoro": False}
#: Weight of the matched (kNN) envelope in voiced frames against the base's own frames
#: moved to the prompt's class mean (``convert._envelope``). Kokoro's vowels are clear and
#: the kNN replaced them by averages of the prompt's frames. Measured in issue 33 on the TUNE
#: voices of bench/bench_voice.py (judge; docs/builtin-engine.md): 1 pinyin error 0.094, word
#: error 0.025, similarity 0.722, split identification 4/5; 0.5: 0.016, 0.007, 0.692, 3/5;
#: 0: 0.020, 0, 0.674, 2/5. espeak's envelope is not worth keeping: matched alone.
_MATCHED_ENVELOPE = {"espeak": 1.0, "kokoro": 0.5}


def voice_name(lang: str, variant: str) -> str:
    """An espeak voice name with its variant (``cmn+f2``)."""
    return f"{lang}+{variant}" if variant else lang


class Plan:
    """What one request does to every sentence."""

    def __init__(
        self, *, pool: FramePool | None, params: dict[str, Any], effect: StyleEffect, speed: float,
        rng: np.random.Generator, base: str,
    ) -> None:  # fmt: skip
        self.pool = pool
        self.prompt = pool is not None
        self.params = params
        self.effect = effect
        self.base = base
        seed_rate = float(np.clip(np.exp(rng.normal(0.0, 0.03)), 0.94, 1.06))
        self.seed_pitch = float(np.clip(rng.normal(0.0, 0.4), -1.0, 1.0))
        self.rng = rng
        #: Requested speaking rate relative to the base's normal rate.
        self.rate = float(speed) * effect.rate * seed_rate
        # This order of products, as before Kokoro: the residual is exact to the last bit.
        wpm = _BASE_WPM * speed * effect.rate * seed_rate
        self.wpm = int(np.clip(round(wpm), _MIN_WPM, _MAX_WPM))
        #: Duration factor left for the resynthesis (espeak: integer wpm).
        self.residual = self.wpm / wpm

    # --- espeak ------------------------------------------------------------------------

    def espeak_params(self, lang: str) -> EspeakParams:
        """espeak parameters of one run; draws the run's seed variation."""
        pitch = 50 + int(self.rng.integers(-3, 4))
        span = 50 + int(self.rng.integers(-6, 7))
        if not self.prompt:
            # Presets take style pitch/range from espeak itself, with no resynthesis.
            # About 0.2 semitone per unit above 50 and 0.15 below (measured on cmn).
            shift = self.effect.pitch + self.seed_pitch
            pitch += round(shift / 0.2) if shift > 0 else round(shift / 0.15)
            span = round(span * self.effect.range)
        voice = voice_name(lang, str(self.params.get("base", "")))
        return EspeakParams(voice, rate=self.wpm, pitch=int(np.clip(pitch, 0, 100)), range=int(np.clip(span, 0, 100)))

    # --- kokoro ------------------------------------------------------------------------

    def kokoro_voice(self, language: str) -> str:
        """The Kokoro voice of a sentence in ``language`` (``zh``/``en``)."""
        fixed = self.params.get("kokoro")
        if fixed:
            return str(fixed)
        return BASE_VOICES[(language, str(self.params.get("pitch_class", "female")))]

    # --- both --------------------------------------------------------------------------

    def transform(self, x: NDArray[Any], rate: int, residual: float) -> NDArray[Any]:
        """A sentence of base audio at ``rate`` made into the voice: the prompt's frames
        matched, or for presets the style's pitch and the duration left to apply."""
        return self.transform_piece(x, rate, residual, None)[0]

    def transform_piece(
        self, x: NDArray[Any], rate: int, residual: float, anchor: Anchor | float | None
    ) -> tuple[NDArray[Any], Anchor | float | None]:
        """:meth:`transform` of one piece of a sentence, with the sentence's ``anchor``
        (what its first piece was normalised by; None for the first piece): returns the
        audio and the anchor for the next piece."""
        if self.pool is not None:
            prosody = Prosody(
                pitch_st=self.effect.pitch + self.seed_pitch,
                range_factor=self.effect.range,
                duration_factor=residual,
            )
            return transfer_piece(x, rate, self.pool, prosody, dio_speed=_DIO_SPEED[self.base],
                                  unvoiced=_MATCH_UNVOICED[self.base], matched=_MATCHED_ENVELOPE[self.base],
                                  anchor=anchor if isinstance(anchor, Anchor) else None)  # fmt: skip
        if self.base == "kokoro" and "kokoro" in self.params and (self.effect.pitch or self.effect.range != 1.0):
            x, anchor = shift_pitch(x, rate, self.effect.pitch, self.effect.range,
                                    anchor if isinstance(anchor, float) else None)  # fmt: skip
        if abs(residual - 1.0) > _PRESET_STRETCH_TOLERANCE:
            return change_duration(x, rate, residual), anchor
        return x, anchor
