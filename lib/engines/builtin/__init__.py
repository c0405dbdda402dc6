"""The built-in offline voice-cloning engine: espeak-ng speech, rebuilt from a prompt's frames.

Pipeline per request: parse the style (:mod:`.style`), split the text into sentences
and runs of one script and language (:mod:`.lang`), speak each run with espeak-ng
(:mod:`.espeak`) in the profile's base variant, then per sentence rebuild every frame
from the nearest frames of the prompt (:mod:`.convert`, prompt voices only) and shape
the level. Profiles, with the prompt's frame pool, come from :mod:`.profile`. Each
sentence is rendered independently, so :meth:`BuiltinEngine.stream` yields sentences
and their concatenation is exactly :meth:`BuiltinEngine.synthesise`.

Convert mode (:meth:`BuiltinEngine.convert`, speech to speech) runs the same frame
transfer on a recording instead of espeak's reading: the recording's words and timing,
the voice's frames and pitch. A preset voice has a pool too, analysed once per engine
from espeak reading a calibration text in that preset's variant.

Seed: a ``numpy`` Generator seeded from the request's seed draws a small prosody
variation -- a speaking-rate factor (about +-3 %) and a pitch offset for the request
(about +-0.4 semitone), and per run of text an espeak pitch and range offset, which
varies the contour from phrase to phrase. No global random state is used.

Determinism: espeak-ng runs in a fresh fork for every run (see :mod:`.espeak`), and the
matching is single-threaded float64 WORLD/numpy DSP whose random generator is reseeded
in every call (see :mod:`._world`), so identical requests give identical bytes in any
process. Both espeak and WORLD keep global state, so calls are serialised.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
from numpy.typing import NDArray
from scipy.signal import resample_poly

from lib.config import BuiltinConfig
from lib.engines.base import MODES, PROMPT_SAMPLE_RATE, Synthesis, VoiceProfile
from lib.engines.builtin import _world
from lib.engines.builtin.convert import Prosody, transfer
from lib.engines.builtin.defuse import defuse
from lib.engines.builtin.espeak import ESPEAK_SAMPLE_RATE, EspeakParams, EspeakSynth
from lib.engines.builtin.lang import speakable, split_runs, split_sentences
from lib.engines.builtin.matching import change_duration, shape_level
from lib.engines.builtin.pool import FRAME_PERIOD_MS, FramePool, build_pool
from lib.engines.builtin.profile import FEMALE_THRESHOLD_HZ, analyse_prompt, check_speech
from lib.engines.builtin.style import StyleEffect, parse_style
from lib.errors import EngineError, NotFoundError, PromptAudioError, ValidationError

__all__ = ["BuiltinEngine"]

_LOGGER = logging.getLogger(__name__)

#: Bump whenever the audio for the same request changes.
_ALGORITHM_VERSION = "builtin-3"

_FEMALE, _MALE = "f2", ""
#: espeak variants that prompt voices are read in (female, male), chosen by the prompt's
#: median pitch. A per-prompt search was measured on the tuning voices: the best variant
#: differs by voice (megatts3_zh 0.666 with m2 vs 0.602 with m1; zh_female 0.755 with f1
#: vs 0.730 with f2, but f1's English WER 0.86 vs 0.75), and the one cheap criterion
#: tried, the mean nearest-frame distance to the pool, picked the best variant for 1 of 3
#: voices; so the choice stays by pitch.
_PROMPT_FEMALE, _PROMPT_MALE = "f2", "m1"
#: name -> (espeak language of Han runs or None for the default, espeak variant)
_PRESETS: dict[str, tuple[str | None, str]] = {
    "zh-female": ("cmn", _FEMALE),
    "zh-male": ("cmn", _MALE),
    "en-female": (None, _FEMALE),
    "en-male": (None, _MALE),
    "yue-female": ("yue", _FEMALE),
}
#: What a preset voice's pool is analysed from (convert mode into a preset voice).
_CALIBRATION_TEXTS = (
    ("cmn", "我们今天下午一起去公园散步，那里的风景非常美丽。请大家排好队，按顺序进入会场。"),
    ("en-us", "Please have your ticket ready. The weather today is sunny with a light breeze from the north."),
)
_BASE_WPM = 175
_MIN_WPM, _MAX_WPM = 80, 450
#: Below this rate residual a preset's espeak audio is used as it is (a resynthesis
#: would change the voice for an inaudible 0.3 % of duration from rounding the rate).
_PRESET_STRETCH_TOLERANCE = 0.02
_EDGE_SILENCE = int(0.04 * ESPEAK_SAMPLE_RATE)


class BuiltinEngine:
    """espeak-ng + closed-form voice matching; implements :class:`lib.engines.base.Engine`."""

    name = "builtin"
    sample_rate = ESPEAK_SAMPLE_RATE
    modes = frozenset(MODES)
    style_modes = frozenset(MODES)

    def __init__(self, config: BuiltinConfig | None = None) -> None:
        self._config = config or BuiltinConfig()
        self._espeak = EspeakSynth()
        version = f"{_ALGORITHM_VERSION}+espeak-{self._espeak.version}+world-{_world.version()}"
        if self._config.language != "auto":
            version += f"+lang-{self._config.language}"
        self.model_version = version
        self._dsp_lock = threading.Lock()
        self._preset_pools: dict[str, FramePool] = {}

    # --- voices ------------------------------------------------------------------------

    def presets(self) -> list[str]:
        return sorted(_PRESETS)

    def preset_voice(self, name: str) -> VoiceProfile:
        if name not in _PRESETS:
            raise NotFoundError(f"unknown preset voice {name!r}; use one of {', '.join(sorted(_PRESETS))}")
        han, variant = _PRESETS[name]
        return VoiceProfile(self.name, self.model_version, "preset", {"preset": name, "han": han, "base": variant})

    def extract_voice(self, prompt_pcm: NDArray[Any], prompt_text: str) -> VoiceProfile:
        pcm = np.asarray(prompt_pcm)
        if pcm.dtype != np.int16:
            raise ValidationError(f"prompt PCM must be int16, got {pcm.dtype}")
        with self._dsp_lock:
            stats, pool = analyse_prompt(pcm, PROMPT_SAMPLE_RATE)
        median_hz = 2.0 ** (stats.median_st / 12.0)
        base = _PROMPT_FEMALE if median_hz > FEMALE_THRESHOLD_HZ else _PROMPT_MALE
        params = {
            "base": base,
            "f0_median_hz": round(median_hz, 3),
            "f0_range_st": round(stats.range_st, 4),
            "voiced_seconds": round(stats.voiced_seconds, 2),
            "pool": pool.params(),
        }
        _LOGGER.debug("extracted voice profile %s", params)
        return VoiceProfile(self.name, self.model_version, "prompt", params, pool.to_blob())

    def _pool(self, voice: VoiceProfile) -> FramePool:
        """The frame pool of a prompt profile, or of a preset's base variant."""
        if voice.kind == "prompt":
            try:
                return FramePool.from_stored(dict(voice.params["pool"]), voice.blob)
            except (KeyError, TypeError, ValueError) as exc:
                raise ValidationError(
                    f"voice profile has no usable frame pool ({exc}); extract the voice again"
                ) from exc
        return self._preset_pool(str(voice.params.get("base", "")))

    def _preset_pool(self, variant: str) -> FramePool:
        """Pool of an espeak variant, from the calibration texts; once per engine."""
        with self._dsp_lock:
            if variant in self._preset_pools:
                return self._preset_pools[variant]
        pcm = np.concatenate([self._espeak.synth(text, EspeakParams(_voice_name(lang, variant)))
                              for lang, text in _CALIBRATION_TEXTS])  # fmt: skip
        x = pcm.astype(np.float64) / 32768.0
        with self._dsp_lock:
            f0, times = _world.f0_track(x, ESPEAK_SAMPLE_RATE, FRAME_PERIOD_MS)
            pool = build_pool(x, ESPEAK_SAMPLE_RATE, f0, times)
            if pool is None:  # pragma: no cover - the calibration texts are mostly voiced
                raise EngineError(f"could not analyse the espeak base voice {variant!r}")
            self._preset_pools[variant] = pool
        return pool

    # --- synthesis ---------------------------------------------------------------------

    def synthesise(
        self, text: str, voice: VoiceProfile, *, style: str, seed: int, speed: float, mode: str
    ) -> Synthesis:
        info, chunks = self._render(text, voice, style=style, seed=seed, speed=speed, mode=mode)
        audio = np.concatenate(list(chunks)).astype(np.float32, copy=False)
        return Synthesis(audio, info)

    def stream(
        self, text: str, voice: VoiceProfile, *, style: str, seed: int, speed: float, mode: str
    ) -> Iterator[NDArray[Any]]:
        _, chunks = self._render(text, voice, style=style, seed=seed, speed=speed, mode=mode)
        yield from chunks

    def close(self) -> None:
        self._espeak.close()

    def interrupt(self) -> bool:
        """End a call stuck in espeak-ng now, from any thread (the watchdog's hook): its
        worker and the worker's child are killed, the call fails and releases the locks,
        and the next call starts a fresh worker. A call in the DSP (numpy, bounded by the
        text's length) finishes on its own. True if a worker was killed."""
        return self._espeak.interrupt()

    # --- convert mode ------------------------------------------------------------------

    def convert(self, source_pcm: NDArray[Any], voice: VoiceProfile, *, seed: int, speed: float) -> Synthesis:
        """Re-speak a recording (mono int16 at 16 kHz) in ``voice``: its words, timing
        and intonation shape; the voice's frames and pitch. ``speed`` scales the
        duration (2.0 is half as long); the seed draws the same small pitch offset as in
        synthesis. Deterministic, like :meth:`synthesise`."""
        if voice.engine != self.name:
            raise ValidationError(f"voice profile was made by engine {voice.engine!r}, not {self.name!r}")
        if not (isinstance(speed, (int, float)) and math.isfinite(speed) and speed > 0):
            raise ValidationError(f"speed must be a positive number, got {speed!r}")
        pcm = np.asarray(source_pcm)
        if pcm.dtype != np.int16:
            raise ValidationError(f"source PCM must be int16, got {pcm.dtype}")
        x = check_speech(pcm, PROMPT_SAMPLE_RATE, "source audio")
        pool = self._pool(voice)
        rng = np.random.default_rng(int(seed) % 2**64)
        rng.normal(0.0, 0.03)  # the rate draw of synthesis, unused here, keeps the pitch draw the same
        seed_pitch = float(np.clip(rng.normal(0.0, 0.4), -1.0, 1.0))
        # The recording is brought to the output rate first; above its 8 kHz band edge
        # there is nothing, and the transfer keeps it so.
        up = resample_poly(x, ESPEAK_SAMPLE_RATE // 50, PROMPT_SAMPLE_RATE // 50)
        with self._dsp_lock:
            f0, _ = _world.f0_track(up, ESPEAK_SAMPLE_RATE, FRAME_PERIOD_MS)
            if int((f0 > 0).sum()) < 20:
                raise PromptAudioError(
                    "source audio has no voiced speech to convert; upload a recording of a person speaking"
                )
            y = transfer(up, ESPEAK_SAMPLE_RATE, pool, Prosody(pitch_st=seed_pitch, duration_factor=1.0 / float(speed)),
                         dio_speed=1)  # fmt: skip
        out = shape_level(y, 1.0)
        if not np.all(np.isfinite(out)) or out.size == 0:
            raise EngineError("the builtin engine produced invalid samples")
        info = {"base_voice": str(voice.params.get("base", "")),
                "source_seconds": round(x.size / PROMPT_SAMPLE_RATE, 3)}  # fmt: skip
        return Synthesis(out, info)

    def _render(
        self, text: str, voice: VoiceProfile, *, style: str, seed: int, speed: float, mode: str
    ) -> tuple[dict[str, Any], Iterator[NDArray[Any]]]:
        """Validate the request, then return its info and a lazy per-sentence renderer."""
        if mode not in MODES:
            raise ValidationError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
        if voice.engine != self.name:
            raise ValidationError(f"voice profile was made by engine {voice.engine!r}, not {self.name!r}")
        if not (isinstance(speed, (int, float)) and math.isfinite(speed) and speed > 0):
            raise ValidationError(f"speed must be a positive number, got {speed!r}")
        sentences = split_sentences(text)
        if not sentences:
            raise ValidationError("text is empty; give some text to speak")
        if not speakable(text):
            # Nothing espeak can read (punctuation, emoji, other scripts): a client
            # error, not an engine failure.
            raise ValidationError(
                "text: has nothing the builtin engine can speak; it reads Chinese (Mandarin, Cantonese) "
                "and English words and digits"
            )
        effect = parse_style(style)
        rng = np.random.default_rng(int(seed) % 2**64)
        seed_rate = float(np.clip(np.exp(rng.normal(0.0, 0.03)), 0.94, 1.06))
        seed_pitch = float(np.clip(rng.normal(0.0, 0.4), -1.0, 1.0))
        wpm = _BASE_WPM * speed * effect.rate * seed_rate
        espeak_wpm = int(np.clip(round(wpm), _MIN_WPM, _MAX_WPM))
        plan = _Plan(
            pool=self._pool(voice) if voice.kind == "prompt" else None,
            params=dict(voice.params),
            effect=effect,
            wpm=espeak_wpm,
            residual=espeak_wpm / wpm,
            seed_pitch=seed_pitch,
        )
        han = self._config.language if self._config.language != "auto" else plan.params.get("han") or "auto"
        runs_per_sentence = [split_runs(s, han) for s in sentences]
        info: dict[str, Any] = {
            "ignored_style_words": list(effect.ignored),
            "style_words": list(effect.words),
            "languages": sorted({lang for runs in runs_per_sentence for lang, _ in runs}),
            "base_voice": plan.params.get("base", ""),
            "sentences": len(sentences),
        }
        return info, self._sentences(runs_per_sentence, plan, rng)

    def _sentences(
        self, runs_per_sentence: list[list[tuple[str, str]]], plan: _Plan, rng: np.random.Generator
    ) -> Iterator[NDArray[Any]]:
        produced = False
        for runs in runs_per_sentence:
            pieces = []
            for i, (lang, chunk) in enumerate(runs):
                params = plan.espeak_params(lang, rng)
                pcm = self._espeak.synth(defuse(chunk), params)
                pieces.append(_trim(pcm, lead=i > 0, tail=i < len(runs) - 1))
            if not pieces:
                continue
            x = np.concatenate(pieces).astype(np.float64) / 32768.0
            if x.size == 0:
                continue
            with self._dsp_lock:
                x = plan.transform(x)
            out = shape_level(x, plan.effect.energy)
            if not np.all(np.isfinite(out)):
                raise EngineError("the builtin engine produced invalid samples")
            produced = True
            yield out
        if not produced:
            # Text of punctuation only: a short silence rather than nothing.
            yield np.zeros(int(0.2 * ESPEAK_SAMPLE_RATE), dtype=np.float32)


class _Plan:
    """Per-request prosody decisions, shared by all sentences of the request."""

    def __init__(
        self,
        *,
        pool: FramePool | None,
        params: dict[str, Any],
        effect: StyleEffect,
        wpm: int,
        residual: float,
        seed_pitch: float,
    ) -> None:
        self.pool = pool
        self.prompt = pool is not None
        self.params = params
        self.effect = effect
        self.wpm = wpm
        self.residual = residual
        self.seed_pitch = seed_pitch

    def espeak_params(self, lang: str, rng: np.random.Generator) -> EspeakParams:
        """espeak parameters of one run; draws the run's seed variation from ``rng``."""
        pitch = 50 + int(rng.integers(-3, 4))
        span = 50 + int(rng.integers(-6, 7))
        if not self.prompt:
            # Presets take style pitch/range from espeak itself, with no resynthesis.
            # About 0.2 semitone per unit above 50 and 0.15 below (measured on cmn).
            shift = self.effect.pitch + self.seed_pitch
            pitch += round(shift / 0.2) if shift > 0 else round(shift / 0.15)
            span = round(span * self.effect.range)
        voice = _voice_name(lang, str(self.params.get("base", "")))
        return EspeakParams(voice, rate=self.wpm, pitch=int(np.clip(pitch, 0, 100)), range=int(np.clip(span, 0, 100)))

    def transform(self, x: NDArray[Any]) -> NDArray[Any]:
        if self.pool is not None:
            prosody = Prosody(
                pitch_st=self.effect.pitch + self.seed_pitch,
                range_factor=self.effect.range,
                duration_factor=self.residual,
            )
            return transfer(x, ESPEAK_SAMPLE_RATE, self.pool, prosody)
        if abs(self.residual - 1.0) > _PRESET_STRETCH_TOLERANCE:
            return change_duration(x, ESPEAK_SAMPLE_RATE, self.residual)
        return x


def _voice_name(lang: str, variant: str) -> str:
    return f"{lang}+{variant}" if variant else lang


def _trim(pcm: NDArray[Any], *, lead: bool, tail: bool) -> NDArray[Any]:
    """Cut silence at the joins between runs of one sentence to at most 40 ms."""
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > 64)
    if loud.size == 0:
        return pcm
    start = max(int(loud[0]) - _EDGE_SILENCE, 0) if lead else 0
    end = min(int(loud[-1]) + _EDGE_SILENCE, pcm.size) if tail else pcm.size
    return pcm[start:end]
