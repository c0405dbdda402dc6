"""The built-in offline voice-cloning engine: a base voice, rebuilt from a prompt's frames.

Two bases (``builtin.base``):

- ``kokoro`` (the default where it is installed, :mod:`.kokoro`): Kokoro-82M, a neural
  voice, speaks the text's reading (:class:`lib.text.Reading`) sentence by sentence -- a
  fixed Kokoro voice per sentence language and prompt pitch class, or the preset's own
  voice -- at 24 kHz, edges trimmed;
- ``espeak``: espeak-ng speaks runs of one script and language (:mod:`.lang`,
  :mod:`.espeak`) in the profile's variant, at 22.05 kHz. It is the fallback when Kokoro
  is not installed (with one warning) and the fast test suite's base.

Then, per sentence, every frame of a prompt voice is rebuilt from the nearest frames of
the prompt (:mod:`.convert`) and the level is shaped (:mod:`.matching`). Profiles, with
the prompt's frame pool, come from :mod:`.profile`; per-request prosody from
:mod:`.plan`; presets from :mod:`.presets`. Each sentence is rendered independently, so
:meth:`BuiltinEngine.stream` yields sentences (on the Kokoro base: the pieces of each
sentence, :mod:`.kokoro.phonemes`, so that a one-sentence miss starts to sound after its
first piece) and their concatenation is exactly :meth:`BuiltinEngine.synthesise`.

Convert mode (:meth:`BuiltinEngine.convert`, speech to speech) runs the same frame
transfer on a recording instead of the base's reading. A preset voice has a pool too,
analysed once per engine from its base reading a calibration text.

Determinism: espeak-ng runs in a fresh fork for every call (see :mod:`.espeak`), Kokoro's
graph has no random ops (bit-identical across processes and thread counts), and the
matching is single-threaded float64 WORLD/numpy DSP whose random generator is reseeded
in every call (see :mod:`._world`), so identical requests give identical bytes in any
process.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Iterator
from typing import Any, NotRequired

import numpy as np
from numpy.typing import NDArray
from scipy.signal import resample_poly
from typing_extensions import TypedDict

from lib.config import BuiltinConfig
from lib.engines.base import MODES, PROMPT_SAMPLE_RATE, Synthesis, VoiceProfile
from lib.engines.builtin import _world
from lib.engines.builtin.convert import Prosody, transfer
from lib.engines.builtin.defuse import defuse
from lib.engines.builtin.espeak import ESPEAK_SAMPLE_RATE, EspeakParams, EspeakSynth
from lib.engines.builtin.espeak_reading import espeak_runs, espeak_sentences
from lib.engines.builtin.kokoro import resolve_base
from lib.engines.builtin.kokoro.canary import check_kernels, check_outputs
from lib.engines.builtin.kokoro.model import thread_count
from lib.engines.builtin.kokoro.phonemes import Sentence
from lib.engines.builtin.kokoro.render import SAMPLE_RATE, KokoroBase
from lib.engines.builtin.lang import has_cantonese, speakable, split_runs, split_sentences
from lib.engines.builtin.matching import level_gain, shape_level
from lib.engines.builtin.plan import Plan, voice_name
from lib.engines.builtin.pool import FRAME_PERIOD_MS, FramePool, build_pool
from lib.engines.builtin.presets import preset_names, preset_params
from lib.engines.builtin.profile import FEMALE_THRESHOLD_HZ, analyse_prompt, check_speech
from lib.engines.builtin.style import parse_style
from lib.engines.plausible import NO_BOUNDS, Bounds, InvalidAudioError, check_chunk, check_duration, units
from lib.errors import EngineError, EngineUnavailableError, PromptAudioError, ValidationError
from lib.text import read as default_read
from lib.text.tokens import Reading

__all__ = ["BuiltinEngine", "RenderInfo"]

_LOGGER = logging.getLogger(__name__)

#: Bump whenever the audio for the same request changes (espeak base).
_ALGORITHM_VERSION = "builtin-4"
#: The same for the Kokoro base.
_KOKORO_ALGORITHM_VERSION = "builtin-kokoro-4"
#: espeak variants that prompt voices are read in (female, male), chosen by the prompt's
#: median pitch. A per-prompt search was measured on the tuning voices: the best variant
#: differs by voice (megatts3_zh 0.666 with m2 vs 0.602 with m1; zh_female 0.755 with f1
#: vs 0.730 with f2, but f1's English WER 0.86 vs 0.75), and the one cheap criterion
#: tried, the mean nearest-frame distance to the pool, picked the best variant for 1 of 3
#: voices; so the choice stays by pitch.
_PROMPT_FEMALE, _PROMPT_MALE = "f2", "m1"
#: What a preset voice's pool is analysed from (convert mode into a preset voice).
_CALIBRATION_TEXTS = (
    ("cmn", "我们今天下午一起去公园散步，那里的风景非常美丽。请大家排好队，按顺序进入会场。"),
    ("en-us", "Please have your ticket ready. The weather today is sunny with a light breeze from the north."),
)
_EDGE_SILENCE = int(0.04 * ESPEAK_SAMPLE_RATE)
#: Silence after every sentence but the last (Kokoro base; espeak keeps its own).
_SENTENCE_GAP = 0.3

Reader = Callable[[str], Reading]
#: Kernel-check failures already warned about (one warning per process per problem).
_warned: set[str] = set()
_warned_lock = threading.Lock()


class RenderInfo(TypedDict):
    """The builtin engine's ``Synthesis.info``: the style words it followed and ignored,
    and (once the text is planned) the base voice, languages and sentences it read."""

    ignored_style_words: list[str]
    style_words: list[str]
    base: str
    """``kokoro`` or ``espeak``: the base that reads this request."""
    base_voice: NotRequired[str]
    """The espeak variant, or the Kokoro voices (``+``-joined, in order of use)."""
    languages: NotRequired[list[str]]
    sentences: NotRequired[int]
    pieces: NotRequired[list[int]]
    """The Kokoro base: the samples of each piece (a chunk of :meth:`BuiltinEngine.stream`)."""


class BuiltinEngine:
    """A base voice + closed-form voice matching; implements :class:`lib.engines.base.Engine`."""

    name = "builtin"
    #: Its audio's length follows the reading (lib.engines.plausible checks "too long" too).
    paced = True
    modes = frozenset(MODES)
    style_modes = frozenset(MODES)

    def __init__(
        self, config: BuiltinConfig | None = None, *, cache_dir: str | None = None, reader: Reader | None = None
    ) -> None:
        """``reader``: text -> :class:`Reading` where a call brings no reading (a direct
        call; the service always gives one): the default front end, :func:`lib.text.read`.
        ``cache_dir`` is accepted for callers of the past and unused."""
        self._config = config or BuiltinConfig()
        self._espeak = EspeakSynth()
        self._read: Reader = reader or default_read
        world = f"espeak-{self._espeak.version}+world-{_world.version()}"
        self.base, install = resolve_base(self._config.base, self._config.kokoro_voices)
        self._kokoro: KokoroBase | None = None
        #: Why the Kokoro base is not used or refuses (``/healthz``); empty while it is fine.
        self._problems: list[str] = []
        #: Set when the model failed its check at load: why the base refuses its requests.
        self._refusal: str | None = None
        self._checked = threading.Event()
        self._check_lock = threading.Lock()
        self._loader: threading.Thread | None = None
        if install is not None:
            problem = check_kernels(thread_count(self._config.threads))
            if problem is not None:
                self._fall_back(problem)
                install = None
        if install is not None:
            self._kokoro = KokoroBase(install, self._espeak, threads=self._config.threads)
            version = f"{_KOKORO_ALGORITHM_VERSION}+{self._kokoro.version}+{world}"
            self.sample_rate = SAMPLE_RATE
        else:
            version = f"{_ALGORITHM_VERSION}+{world}"
            self.sample_rate = ESPEAK_SAMPLE_RATE
        if self._config.language != "auto":
            version += f"+lang-{self._config.language}"
        self.model_version = version
        self._dsp_lock = threading.Lock()
        self._preset_pools: dict[str, FramePool] = {}

    def _fall_back(self, problem: str) -> None:
        """The kernel check failed: the espeak base serves, with one warning and the reason."""
        self.base = "espeak"
        reason = f"the Kokoro base is off, the espeak base serves: {problem}"
        self._problems.append(reason)
        with _warned_lock:
            first = problem not in _warned
            _warned.add(problem)
        if first:
            _LOGGER.warning("%s", reason)

    def warm_in_background(self) -> None:
        """Load and check the Kokoro model in a thread, so that the first request finds it
        ready (the web app calls this at start; a preload that finds everything cached never
        loads it). The thread is joined by :meth:`close` and at exit (not a daemon: an
        interpreter that exits while onnxruntime builds its session aborts the process)."""
        if self._kokoro is None or self._loader is not None:
            return
        self._loader = threading.Thread(target=self._warm, name="kokoro-load")
        self._loader.start()

    def _warm(self) -> None:
        try:
            self.warm()
        except Exception as exc:  # reported again by the request that needs the model
            _LOGGER.warning("the Kokoro model did not load: %s", exc)

    def warm(self) -> None:
        """Load the Kokoro model and check what it says (:func:`.kokoro.canary.check_outputs`),
        once; later calls return at once."""
        if self._kokoro is None or self._checked.is_set():
            return
        with self._check_lock:
            if self._checked.is_set():
                return
            self._kokoro.load()
            problem = check_outputs(self._kokoro, self._read)
            if problem is not None:
                self._refusal = f"the Kokoro base failed its check at load and refuses requests: {problem}"
                self._problems.append(self._refusal)
                _LOGGER.error("%s", self._refusal)
            self._checked.set()

    def _check_kokoro(self) -> None:
        """Before Kokoro speaks: the model loaded and checked; refuse if the check failed."""
        self.warm()
        if self._refusal is not None:
            raise EngineUnavailableError(
                f"{self._refusal}. Install the pinned onnxruntime (pip install -r requirements.txt) or set "
                "builtin.base: espeak (TTS_BUILTIN_BASE=espeak)"
            )

    def health_problems(self) -> list[str]:
        """Why the engine does not serve as configured (``/healthz`` shows them); [] when it does."""
        return list(self._problems)

    # --- voices ------------------------------------------------------------------------

    def _kokoro_names(self) -> list[str] | None:
        return self._kokoro.voices.names if self._kokoro is not None else None

    def presets(self) -> list[str]:
        return preset_names(self._kokoro_names())

    def preset_voice(self, name: str) -> VoiceProfile:
        return VoiceProfile(self.name, self.model_version, "preset", preset_params(name, self._kokoro_names()))

    def extract_voice(self, prompt_pcm: NDArray[Any], prompt_text: str) -> VoiceProfile:
        pcm = np.asarray(prompt_pcm)
        if pcm.dtype != np.int16:
            raise ValidationError(f"prompt PCM must be int16, got {pcm.dtype}")
        with self._dsp_lock:
            stats, pool = analyse_prompt(pcm, PROMPT_SAMPLE_RATE)
        median_hz = 2.0 ** (stats.median_st / 12.0)
        female = median_hz > FEMALE_THRESHOLD_HZ
        params: dict[str, Any] = {"base": _PROMPT_FEMALE if female else _PROMPT_MALE}
        if self._kokoro is not None:
            params["pitch_class"] = "female" if female else "male"
        params.update({
            "f0_median_hz": round(median_hz, 3),
            "f0_range_st": round(stats.range_st, 4),
            "voiced_seconds": round(stats.voiced_seconds, 2),
            "pool": pool.params(),
        })  # fmt: skip
        _LOGGER.debug("extracted voice profile %s", params)
        return VoiceProfile(self.name, self.model_version, "prompt", params, pool.to_blob())

    def _pool(self, voice: VoiceProfile) -> FramePool:
        """The frame pool of a prompt profile, or of a preset's base voice."""
        if voice.kind == "prompt":
            try:
                return FramePool.from_stored(dict(voice.params["pool"]), voice.blob)
            except (KeyError, TypeError, ValueError) as exc:
                raise ValidationError(
                    f"voice profile has no usable frame pool ({exc}); extract the voice again"
                ) from exc
        if voice.params.get("kokoro"):
            return self._preset_pool(f"kokoro:{voice.params['kokoro']}")
        return self._preset_pool(str(voice.params.get("base", "")))

    def _preset_pool(self, key: str) -> FramePool:
        """Pool of a preset's base voice (an espeak variant, or ``kokoro:<voice>``) from
        the calibration texts; once per engine."""
        with self._dsp_lock:
            if key in self._preset_pools:
                return self._preset_pools[key]
        if key.startswith("kokoro:") and self._kokoro is not None:
            self._check_kokoro()
            rate = self.sample_rate
            pieces = []
            for _, text in _CALIBRATION_TEXTS:
                for sentence in self._kokoro.sentences(self._read(text)):
                    pieces.append(self._kokoro.say(sentence, key.removeprefix("kokoro:"), 1.0)[0])
            x = np.concatenate(pieces)
        else:
            rate = ESPEAK_SAMPLE_RATE
            pcm = np.concatenate([self._espeak.synth(text, EspeakParams(voice_name(lang, key)))
                                  for lang, text in _CALIBRATION_TEXTS])  # fmt: skip
            x = pcm.astype(np.float64) / 32768.0
        with self._dsp_lock:
            f0, times = _world.f0_track(x, rate, FRAME_PERIOD_MS)
            pool = build_pool(x, rate, f0, times)
            if pool is None:  # pragma: no cover - the calibration texts are mostly voiced
                raise EngineError(f"could not analyse the base voice {key!r}")
            self._preset_pools[key] = pool
        return pool

    # --- synthesis ---------------------------------------------------------------------

    def synthesise(
        self, text: str, voice: VoiceProfile, *, style: str, seed: int, speed: float, mode: str,
        reading: Reading | None = None,
    ) -> Synthesis:  # fmt: skip
        """``reading``: the text's reading from the front end (made here when None)."""
        info, chunks = self._render(text, voice, style=style, seed=seed, speed=speed, mode=mode, reading=reading)
        parts = list(chunks)
        audio = np.concatenate(parts).astype(np.float32, copy=False)
        if info["base"] == "kokoro":
            info["pieces"] = [int(p.size) for p in parts]
        return Synthesis(audio, info)

    def piecewise_for(self, text: str, voice: VoiceProfile) -> bool:
        """Whether this request is made in pieces (the Kokoro base: sub-sentence pieces,
        each a chunk of :meth:`stream`; ``info["pieces"]`` of :meth:`synthesise` lists
        their sizes), so that a finished result can be streamed piece by piece
        (lib.compose.assemble.PieceFinisher)."""
        return voice.engine == self.name and self._speaks_kokoro(text, dict(voice.params))

    def stream(
        self, text: str, voice: VoiceProfile, *, style: str, seed: int, speed: float, mode: str,
        reading: Reading | None = None,
    ) -> Iterator[NDArray[Any]]:  # fmt: skip
        _, chunks = self._render(text, voice, style=style, seed=seed, speed=speed, mode=mode, reading=reading)
        yield from chunks

    def close(self) -> None:
        if self._loader is not None:
            self._loader.join()
        self._espeak.close()

    def interrupt(self) -> bool:
        """End a call stuck in espeak-ng or in the Kokoro model now, from any thread (the
        watchdog's hook, at a deadline and at shutdown): the espeak-ng worker and its
        child are killed, the model's runs under way are terminated; the call fails and
        releases the locks, and the next call starts afresh. A call in the DSP (numpy,
        bounded by the text's length) finishes on its own. True if something was stopped."""
        killed = self._espeak.interrupt()
        stopped = self._kokoro is not None and self._kokoro.model.interrupt()
        return killed or stopped

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
        rate = self.sample_rate
        up = resample_poly(x, rate // 50, PROMPT_SAMPLE_RATE // 50)
        with self._dsp_lock:
            f0, _ = _world.f0_track(up, rate, FRAME_PERIOD_MS)
            if int((f0 > 0).sum()) < 20:
                raise PromptAudioError(
                    "source audio has no voiced speech to convert; upload a recording of a person speaking"
                )
            y = transfer(up, rate, pool, Prosody(pitch_st=seed_pitch, duration_factor=1.0 / float(speed)), dio_speed=1)
        out = check_chunk(shape_level(y, 1.0), "the converted recording")
        if out.size == 0:
            raise InvalidAudioError("empty", "the conversion gave no audio")
        base = str(voice.params.get("kokoro") or voice.params.get("base", ""))
        return Synthesis(out, {"base_voice": base, "source_seconds": round(x.size / PROMPT_SAMPLE_RATE, 3)})

    def _render(
        self, text: str, voice: VoiceProfile, *, style: str, seed: int, speed: float, mode: str,
        reading: Reading | None,
    ) -> tuple[RenderInfo, Iterator[NDArray[Any]]]:  # fmt: skip
        """Validate the request, then return its info and a lazy per-sentence renderer."""
        if mode not in MODES:
            raise ValidationError(f"unknown mode {mode!r}; use one of {', '.join(MODES)}")
        if voice.engine != self.name:
            raise ValidationError(f"voice profile was made by engine {voice.engine!r}, not {self.name!r}")
        if not (isinstance(speed, (int, float)) and math.isfinite(speed) and speed > 0):
            raise ValidationError(f"speed must be a positive number, got {speed!r}")
        if not split_sentences(text):
            raise ValidationError("text is empty; give some text to speak")
        if not speakable(text):
            # Nothing the engine can read (punctuation, emoji, other scripts): a client
            # error, not an engine failure.
            raise ValidationError(
                "text: has nothing the builtin engine can speak; it reads Chinese (Mandarin, Cantonese) "
                "and English words and digits"
            )
        effect = parse_style(style)
        rng = np.random.default_rng(int(seed) % 2**64)
        params = dict(voice.params)
        plan_base = "kokoro" if self._speaks_kokoro(text, params) else "espeak"
        pool = self._pool(voice) if voice.kind == "prompt" else None
        plan = Plan(pool=pool, params=params, effect=effect, speed=speed, rng=rng, base=plan_base)
        info: RenderInfo = {
            "ignored_style_words": list(effect.ignored),
            "style_words": list(effect.words),
            "base": plan_base,
        }
        if plan_base == "kokoro":
            return info, self._kokoro_sentences(reading or self._read(text), plan, info)
        info["base_voice"] = params.get("base", "")
        han = self._config.language if self._config.language != "auto" else params.get("han") or "auto"
        if han != "yue" and not (han == "auto" and has_cantonese(text)):
            # Mandarin and English: espeak-ng says the reading (pinyin as its phonemes),
            # not its own guess at the text.
            said = reading or self._read(text)
            runs = [(espeak_runs(s, said.version), units(s)) for s in espeak_sentences(said)]
            runs = [(r, n) for r, n in runs if r]
            if not runs:
                raise ValidationError(
                    "text: has nothing the builtin engine can speak; it reads Chinese (Mandarin, Cantonese) "
                    "and English words and digits"
                )
            info["languages"] = sorted({lang for sentence, _ in runs for lang, _, _ in sentence})
            info["sentences"] = len(runs)
            return info, self._espeak_sentences(runs, plan)
        # Cantonese: espeak-ng's yue voice reads the characters (the front end reads Mandarin).
        sentences = split_sentences(text)
        # Not checked per sentence here (these sentences are the text's, not the reading's);
        # the producer checks the whole against the reading (one syllable a character in both).
        runs_per_sentence = [
            ([(lang, chunk, False) for lang, chunk in split_runs(s, han)], NO_BOUNDS) for s in sentences
        ]
        info["languages"] = sorted({lang for runs, _ in runs_per_sentence for lang, _, _ in runs})
        info["sentences"] = len(runs_per_sentence)
        return info, self._espeak_sentences(runs_per_sentence, plan)

    def _speaks_kokoro(self, text: str, params: dict[str, Any]) -> bool:
        """Whether this request is read by Kokoro: the base is kokoro, and neither the
        preset (yue-female) nor the text (written Cantonese, ``builtin.language: yue``)
        asks for Cantonese, which only espeak-ng speaks."""
        if self._kokoro is None or params.get("han") or self._config.language == "yue":
            return False
        return params.get("kokoro") is not None or not (self._config.language == "auto" and has_cantonese(text))

    def _kokoro_sentences(self, reading: Reading, plan: Plan, info: RenderInfo) -> Iterator[NDArray[Any]]:
        kokoro = self._kokoro
        if kokoro is None:  # pragma: no cover - _speaks_kokoro checked it
            raise EngineError("the Kokoro base is not installed")
        sentences = kokoro.sentences(reading)
        if self._config.language == "en-us":
            sentences = [Sentence(s.chunks, "en", s.syllables) for s in sentences]
        kinds = {t.kind for t in reading.tokens}
        info["languages"] = sorted({"cmn" if k == "zh" else "en-us" for k in kinds if k != "pause"})
        voices = [plan.kokoro_voice(s.language) for s in sentences]
        info["base_voice"] = "+".join(dict.fromkeys(voices))
        info["sentences"] = len(sentences)
        return self._kokoro_audio(kokoro, sentences, voices, plan)

    def _kokoro_audio(
        self, kokoro: KokoroBase, sentences: list[Sentence], voices: list[str], plan: Plan
    ) -> Iterator[NDArray[Any]]:
        if not sentences:
            raise InvalidAudioError("empty", "the reading gave the Kokoro base no sentence to say")
        self._check_kokoro()
        rate = self.sample_rate
        gap = np.zeros(int(_SENTENCE_GAP * rate), dtype=np.float32)
        residual = kokoro.residual(plan.rate)
        for i, (sentence, name) in enumerate(zip(sentences, voices, strict=True)):
            # Piece by piece (a stream sends each as it is made): the matching normalised
            # by the first piece's statistics and the level by its gain, so that pitch,
            # colour and loudness do not jump at the joins.
            anchor: Any = None
            gain: float | None = None
            made = 0
            count = len(sentence.chunks)
            for n, (x, pause) in enumerate(kokoro.pieces(sentence, name, plan.rate)):
                with self._dsp_lock:
                    x, anchor = plan.transform_piece(x, rate, residual, anchor)
                if gain is None:
                    gain = level_gain(x, plan.effect.energy)
                out = check_chunk(shape_level(x, plan.effect.energy, gain), "a sentence")
                parts = [out, np.zeros(round(pause * residual * rate), dtype=np.float32)]
                made += sum(p.size for p in parts)
                if n == count - 1:
                    # Every sentence as long as its syllables allow, before its end is heard.
                    check_duration(made / rate, sentence.syllables, plan.rate, f"sentence {i + 1}")
                    if i < len(sentences) - 1:
                        parts.append(gap)
                yield np.concatenate(parts)

    def _espeak_sentences(
        self, runs_per_sentence: list[tuple[list[tuple[str, str, bool]], Bounds]], plan: Plan
    ) -> Iterator[NDArray[Any]]:
        """Each sentence's runs (language, input, whether it holds ``[[phonemes]]``) and
        its syllables (checked against its length; zero: not known, not checked)."""
        produced = False
        for n, (runs, syllables) in enumerate(runs_per_sentence):
            pieces = []
            for i, (lang, chunk, phonemes) in enumerate(runs):
                # Phoneme input is built from checked reading units; text is defused.
                said = chunk if phonemes else defuse(chunk)
                pcm = self._espeak.synth(said, plan.espeak_params(lang), phonemes=phonemes)
                pieces.append(_trim(pcm, lead=i > 0, tail=i < len(runs) - 1))
            if not pieces:
                continue
            x = np.concatenate(pieces).astype(np.float64) / 32768.0
            if x.size == 0:
                continue
            with self._dsp_lock:
                x = plan.transform(x, ESPEAK_SAMPLE_RATE, plan.residual)
            out = check_chunk(shape_level(x, plan.effect.energy), "a sentence")
            check_duration(out.size / ESPEAK_SAMPLE_RATE, syllables, plan.rate, f"sentence {n + 1}")
            if self.sample_rate != ESPEAK_SAMPLE_RATE:
                # Cantonese on the Kokoro base: espeak's audio at the engine's rate.
                out = resample_poly(out, self.sample_rate // 150, ESPEAK_SAMPLE_RATE // 150).astype(np.float32)
            produced = True
            yield out
        if not produced:
            # Speakable text (checked in _render) that gave no audio: never a silence in its place.
            raise InvalidAudioError("empty", "espeak-ng gave no audio for the text")


def _trim(pcm: NDArray[Any], *, lead: bool, tail: bool) -> NDArray[Any]:
    """Cut silence at the joins between runs of one sentence to at most 40 ms."""
    loud = np.flatnonzero(np.abs(pcm.astype(np.int32)) > 64)
    if loud.size == 0:
        return pcm
    start = max(int(loud[0]) - _EDGE_SILENCE, 0)
    end = min(int(loud[-1]) + _EDGE_SILENCE, pcm.size)
    return pcm[start if lead else 0 : end if tail else pcm.size]
