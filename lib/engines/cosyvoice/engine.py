"""The CosyVoice engine: CosyVoice-300M, CosyVoice2 and CosyVoice3 behind the Engine interface.

Start-up order is chosen so that failures are cheap and clear: the model directory is
checked first (no imports), then torch and the CosyVoice code are imported, then the
model is loaded, then its fingerprint (remembered between starts) becomes the model
version.

Determinism: all model calls are serialised by one lock, and CosyVoice's
``set_all_random_seed`` runs immediately before each call, so the same request gives the
same samples in any process on the same hardware and code. ``stream`` holds that lock
until its generator is exhausted or closed, because a second request drawing from the
global RNG in between would change the rest of the audio.

Streaming: for CosyVoice2/3 (``cosyvoice.native_stream``, on by default) the audio *is*
upstream's ``stream=True`` output, chunk by chunk, in ``stream`` and in ``synthesise`` alike,
so that the cached audio equals the concatenation of what was streamed. Upstream's streaming
is made deterministic from outside (``upstream.RandomStreams``, ``reset_stream_schedule``).
Upstream refuses ``speed`` in streaming mode, so a request with speed != 1 runs
``stream=False`` per text segment; CosyVoice-300M always does.
"""

from __future__ import annotations

import gc
import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lib.config import CosyVoiceConfig
from lib.engines.base import Synthesis, VoiceProfile
from lib.engines.cosyvoice.convert import prompt_half, restored_prompt
from lib.engines.cosyvoice.modeldir import ModelDir, inspect_model_dir
from lib.engines.cosyvoice.pcm import check_pcm, output_chunk
from lib.engines.cosyvoice.reading import cosyvoice_text
from lib.engines.cosyvoice.runtime import Runtime, accepts, load_runtime, marker_added_by
from lib.engines.cosyvoice.speakers import PROMPT_PREFIX, PromptTable, dump_features, load_features
from lib.engines.cosyvoice.upstream import normaliser_of, reset_stream_schedule, v3_cross_lingual, wind_down
from lib.engines.cosyvoice.version import VersionParts, model_version
from lib.errors import EngineError, EngineUnavailableError, NotFoundError, PromptAudioError, ValidationError
from lib.text.tokens import Reading

__all__ = ["CosyVoiceEngine"]

_LOGGER = logging.getLogger(__name__)

#: CosyVoice3 was trained with this system prompt in front of every prompt/instruction.
_V3_SYSTEM = "You are a helpful assistant."
_V3_END = "<|endofprompt|>"


@dataclass
class _Plan:
    """One upstream call: what to put in the speaker table, then the generator to run."""

    run: Callable[[], Iterator[dict[str, Any]]]
    arm: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    """(speaker id, overrides) to arm in the speaker table right before the call."""


class CosyVoiceEngine:
    """CosyVoice behind :class:`lib.engines.base.Engine`; see the CosyVoice section of ``README.md``."""

    name = "cosyvoice"
    style_modes = frozenset({"instruct"})

    def __init__(self, config: CosyVoiceConfig) -> None:
        started = time.perf_counter()
        self.config = config
        self.model: ModelDir = inspect_model_dir(config.model_dir)
        self._rt: Runtime = load_runtime(config.repo_dir, config.device)
        self.cosyvoice: Any = self._rt.load(self.model, fp16=config.fp16)
        # A plain Lock, not an RLock: a streaming caller (e.g. a web server iterating a sync
        # generator in a thread pool) may resume the generator, and so release it, from
        # another thread than the one that acquired it.
        self._lock = threading.Lock()
        frontend = self.cosyvoice.frontend
        self.sample_rate = int(self.cosyvoice.sample_rate)
        # Upstream frontends carry a text normaliser (ttsfrd/wetext, or at least sentence
        # splitting); cosyvoice-minicpmo removed it and raises if asked to use it.
        self._text_frontend = hasattr(frontend, "text_frontend") or hasattr(frontend, "use_ttsfrd")
        self.normaliser = normaliser_of(frontend)
        """The text normaliser the frontend runs: ``ttsfrd``, ``wetext`` or ``none``."""
        self._pristine_presets = {
            spk: dict(info) for spk, info in frontend.spk2info.items() if not str(spk).startswith(PROMPT_PREFIX)
        }
        self._table = PromptTable(frontend.spk2info, config.prompt_cache_bytes)
        model = self.cosyvoice.model
        self._streams = None
        if config.native_stream and self.model.family.key in ("v2", "v3"):
            self._streams = self._rt.random_streams(self.cosyvoice)
        self._hop = getattr(model, "token_hop_len", None)
        self.version_parts = VersionParts(
            family=self.model.family.key,
            instruct=self.model.instruct,
            code=self._rt.code,
            normaliser=self.normaliser,
            torch=str(self._rt.torch.__version__),
            device=str(getattr(model, "device", "cpu")).split(":")[0],
            fp16=bool(getattr(model, "fp16", False)),
            stream="native" if self._streams is not None else "segments",
        )
        """Everything besides the model files that decides the audio (see ``version.py``)."""
        self.model_version = model_version(self.model, self.version_parts, config.fingerprint_file)
        self.modes = self._supported_modes()
        tokenizer = getattr(frontend, "tokenizer", None)
        specials = getattr(tokenizer, "special_tokens", None)
        self._pinyin_tokens: frozenset[str] = frozenset(
            specials.get("additional_special_tokens", ()) if isinstance(specials, dict) else ()
        )
        """The model's pinyin tokens (CosyVoice3's ``[j]``, ``[ǐ]``...): pinned readings go in as these."""
        self.frontend_runs = 0
        """Prompt frontend runs (speech tokens, features, embedding) since start."""
        _LOGGER.info(
            "cosyvoice %s ready in %.1f s: %s, modes %s, %d preset voices (%s)",
            self.model_version,
            time.perf_counter() - started,
            self.model.path,
            ",".join(sorted(self.modes)),
            len(self._pristine_presets),
            self.version_parts.describe(),
        )

    # -- description ------------------------------------------------------------------

    @property
    def family(self) -> str:
        return self.model.family.key

    @property
    def native_stream(self) -> bool:
        """Whether speed-1 requests are upstream's ``stream=True`` chunks."""
        return self._streams is not None

    @property
    def converts(self) -> bool:
        """Whether the loaded code can convert speech (upstream ``inference_vc``)."""
        return hasattr(self.cosyvoice, "inference_vc") and hasattr(self.cosyvoice.frontend, "_extract_speech_token")

    def _supported_modes(self) -> frozenset[str]:
        modes: set[str] = set()
        has_presets = bool(self._pristine_presets)
        if self.family == "300m" and self.model.instruct:
            # The -Instruct model speaks preset voices with an instruction; it was not
            # trained for cloning (upstream refuses cross-lingual with it).
            if has_presets:
                modes |= {"instruct", "preset"}
        elif self.family == "300m":
            modes |= {"zero_shot", "cross_lingual"}
        else:
            modes |= {"zero_shot", "cross_lingual", "instruct"}
        if has_presets:
            modes.add("preset")
        return frozenset(modes)

    def presets(self) -> list[str]:
        return sorted(self._pristine_presets)

    def preset_voice(self, name: str) -> VoiceProfile:
        if name not in self._pristine_presets:
            known = ", ".join(self.presets()) or "none (this model has no spk2info.pt)"
            raise NotFoundError(f"unknown preset voice {name!r}; this CosyVoice model has: {known}")
        return VoiceProfile(self.name, self.model_version, "preset", {"speaker": name})

    # -- prompt frontend --------------------------------------------------------------

    def extract_voice(self, prompt_pcm: NDArray[Any], prompt_text: str) -> VoiceProfile:
        """Run CosyVoice's prompt frontend once (``add_zero_shot_spk``) and return the
        features as a serialisable profile; they are also registered for immediate use."""
        pcm = check_pcm(prompt_pcm)
        text = self._prompt_text(prompt_text)
        torch = self._rt.torch
        with self._lock:
            key = self._rt.prompt_key(pcm) if self._rt.path_prompts else None
            audio = key if key is not None else torch.from_numpy(pcm).unsqueeze(0)
            scratch = PROMPT_PREFIX + "extracting"
            try:
                self.cosyvoice.add_zero_shot_spk(text, audio, scratch)
                features = self.cosyvoice.frontend.spk2info.pop(scratch)
            except (AssertionError, RuntimeError, ValueError) as exc:
                raise PromptAudioError(
                    f"CosyVoice could not analyse the prompt audio ({exc}); use 3-10 s of clear speech"
                ) from exc
            finally:
                if key is not None:
                    self._rt.wav_registry.pop(key, None)
            self.frontend_runs += 1
            blob, feature_id = dump_features(torch, features)
            self._table.put(PROMPT_PREFIX + feature_id, features)
        return VoiceProfile(
            self.name, self.model_version, "prompt", {"prompt_text": text, "feature_id": feature_id}, blob
        )

    def _prompt_text(self, prompt_text: str) -> str:
        text = prompt_text.strip()
        if text and self._text_frontend:
            text = str(self.cosyvoice.frontend.text_normalize(text, split=False, text_frontend=True))
        if self.family == "v3" and _V3_END not in text:
            text = f"{_V3_SYSTEM}{_V3_END}{text}"
        return text

    # -- synthesis ----------------------------------------------------------------------

    def synthesise(
        self, text: str, voice: VoiceProfile, *, style: str, seed: int, speed: float, mode: str,
        reading: Reading | None = None,
    ) -> Synthesis:  # fmt: skip
        chunks = list(self.stream(text, voice, style=style, seed=seed, speed=speed, mode=mode, reading=reading))
        audio = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
        if audio.size == 0:
            raise EngineError("CosyVoice produced no audio for this text; nothing was cached")
        return Synthesis(audio, {"family": self.family, "chunks": len(chunks)})

    def stream(
        self, text: str, voice: VoiceProfile, *, style: str, seed: int, speed: float, mode: str,
        reading: Reading | None = None,
    ) -> Iterator[NDArray[Any]]:  # fmt: skip
        """The audio of :meth:`synthesise` as float32 chunks: upstream's own streaming chunks
        for CosyVoice2/3 at speed 1 (the first arrives after about 25 speech tokens, not after
        the whole text), else one chunk per text segment. Either way the chunks join to exactly
        the audio ``synthesise`` returns and the cache stores."""
        if not text.strip():
            raise ValidationError("text: is empty; type the words to speak")
        if not (speed > 0 and np.isfinite(speed)):
            raise ValidationError(f"speed: must be positive, got {speed}")
        self._check_profile(voice)
        if reading is not None:  # what the front end decided, in the words CosyVoice reads
            text = cosyvoice_text(reading, self._pinyin_tokens) or text
        return self._generate(text, voice, style, int(seed), float(speed), mode)

    def _generate(
        self, text: str, voice: VoiceProfile, style: str, seed: int, speed: float, mode: str
    ) -> Iterator[NDArray[Any]]:
        with self._lock:
            plan = self._plan(text, voice, style, speed, mode)
            for spk_id, overrides in plan.arm:
                self._arm(spk_id, overrides)
            self._seed(seed)
            outputs = plan.run()
            try:
                for output in outputs:
                    chunk = output_chunk(output)
                    if chunk.size:
                        yield chunk
            finally:
                # Normally a no-op; after a stream was closed mid-way (or failed), stop
                # upstream's LLM thread before the next request may run.
                close = getattr(outputs, "close", None)
                if close is not None:
                    close()
                wind_down(self.cosyvoice.model, self._streams)

    def _seed(self, seed: int) -> None:
        """Everything random starts from ``seed`` (call under the lock, right before a call)."""
        self._rt.set_seed(seed)
        if self._streams is not None:
            self._streams.seed(seed)
        reset_stream_schedule(self.cosyvoice.model, self._hop)

    # -- voice conversion -------------------------------------------------------------------

    def convert(self, source_pcm: NDArray[Any], voice: VoiceProfile, *, seed: int, speed: float) -> Synthesis:
        """Re-speak ``source_pcm`` in ``voice`` with upstream's ``inference_vc``: the source's
        speech tokens replace the LLM's, the voice's cached prompt features condition the
        flow (see ``convert.py``). Deterministic like :meth:`synthesise` (``stream=False``)."""
        if not self.converts:
            raise EngineUnavailableError(
                "this CosyVoice code has no inference_vc; set cosyvoice.repo_dir to an upstream CosyVoice checkout"
            )
        pcm = check_pcm(source_pcm, what="source audio")
        if not (speed > 0 and np.isfinite(speed)):
            raise ValidationError(f"speed: must be positive, got {speed}")
        self._check_profile(voice)
        torch = self._rt.torch
        with self._lock:
            spk_id, _ = self._speaker_for(voice)
            stored = self._pristine_presets.get(spk_id) if voice.kind == "preset" else self._table.features(spk_id)
            if stored is None:  # pragma: no cover - _speaker_for registered it under this lock
                raise EngineError("voice vanished from the speaker table")
            half = prompt_half(torch, stored)
            key = self._rt.prompt_key(pcm) if self._rt.path_prompts else None
            source = key if key is not None else torch.from_numpy(pcm).unsqueeze(0)
            try:
                with restored_prompt(self.cosyvoice.frontend, half) as heard:
                    self._seed(int(seed))
                    outputs = self.cosyvoice.inference_vc(source, None, stream=False, speed=float(speed))
                    chunks = [output_chunk(output) for output in outputs]
            finally:
                if key is not None:
                    self._rt.wav_registry.pop(key, None)
        audio = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.float32)
        if audio.size == 0 or not heard or heard[0] == 0:
            raise PromptAudioError("CosyVoice heard no speech in the source audio; nothing was converted")
        return Synthesis(audio, {"family": self.family, "mode": "convert", "source_tokens": heard[0]})

    def _check_profile(self, voice: VoiceProfile) -> None:
        if voice.engine != self.name or voice.model_version != self.model_version:
            raise EngineError(
                f"voice profile was made by {voice.engine} {voice.model_version}, not by this "
                f"{self.name} {self.model_version}; extract the voice again"
            )

    def _arm(self, spk_id: str, overrides: dict[str, Any]) -> None:
        table = self.cosyvoice.frontend.spk2info
        if spk_id in self._pristine_presets:
            table[spk_id] = dict(self._pristine_presets[spk_id])
        elif not self._table.arm(spk_id):  # pragma: no cover - _plan registers it under the same lock
            raise EngineError("prompt voice vanished from the speaker table")
        if overrides:
            table[spk_id] = {**table[spk_id], **overrides}

    def _speaker_for(self, voice: VoiceProfile) -> tuple[str, bool]:
        """Speaker-table id of ``voice`` and whether it carries prompt features
        (prompt voices always; presets only when saved from a prompt, as in CosyVoice2)."""
        if voice.kind == "preset":
            name = str(voice.params.get("speaker", ""))
            if name not in self._pristine_presets:
                raise NotFoundError(f"unknown preset voice {name!r}; use one of {', '.join(self.presets())}")
            return name, "prompt_speech_feat" in self._pristine_presets[name]
        feature_id = str(voice.params.get("feature_id") or hashlib.sha256(voice.blob).hexdigest()[:24])
        spk_id = PROMPT_PREFIX + feature_id
        if spk_id not in self._table:
            if not voice.blob:
                raise EngineError("prompt voice profile has no features; extract the voice again")
            self._table.put(spk_id, load_features(self._rt.torch, voice.blob, self.cosyvoice.frontend.device))
            self._table.loads += 1
        return spk_id, True

    def _plan(self, text: str, voice: VoiceProfile, style: str, speed: float, mode: str) -> _Plan:
        if mode not in self.modes:
            raise ValidationError(
                f"mode: this CosyVoice model ({self.model.family.models}, {self.model.path.name}) "
                f"does not support {mode}; use one of {', '.join(sorted(self.modes))}"
            )
        cosy, tf = self.cosyvoice, self._text_frontend
        spk_id, has_prompt = self._speaker_for(voice)
        native = self._streams is not None and speed == 1.0
        common: dict[str, Any] = {"stream": native, "speed": speed, "text_frontend": tf}
        prompt_text = str(voice.params.get("prompt_text", ""))
        if mode == "preset" and voice.kind == "prompt":
            mode = "zero_shot" if prompt_text else "cross_lingual"
        if mode == "preset":
            if has_prompt:
                return _Plan(
                    lambda: cosy.inference_zero_shot(text, prompt_text, None, zero_shot_spk_id=spk_id, **common),
                    [(spk_id, {})],
                )
            return _Plan(lambda: cosy.inference_sft(text, spk_id, **common))
        if mode == "instruct" and self.family == "300m":
            if voice.kind != "preset":
                raise ValidationError(
                    "instruct mode of CosyVoice-300M-Instruct speaks a preset voice; pick one of "
                    + ", ".join(self.presets())
                )
            instruction = (
                style if marker_added_by(cosy.frontend.frontend_instruct, "<endofprompt>") else f"{style}<endofprompt>"
            )
            return _Plan(lambda: cosy.inference_instruct(text, spk_id, instruction, **common))
        if not has_prompt:
            raise ValidationError(f"mode: {mode} needs a prompt voice; preset {spk_id!r} has no prompt features")
        if mode == "zero_shot":
            if not prompt_text:
                raise ValidationError("prompt_text: zero_shot mode needs the transcript of the prompt audio")
            return _Plan(
                lambda: cosy.inference_zero_shot(text, prompt_text, None, zero_shot_spk_id=spk_id, **common),
                [(spk_id, {})],
            )
        if mode == "cross_lingual":
            if not accepts(cosy.inference_cross_lingual, "zero_shot_spk_id"):
                raise EngineUnavailableError(
                    "this CosyVoice code cannot reuse prompt features in cross-lingual "
                    "mode (no zero_shot_spk_id); update the upstream checkout"
                )
            if self.family == "v3":
                normalise = cosy.frontend.text_normalize if self._text_frontend else None
                rearm = lambda: self._arm(spk_id, {})  # noqa: E731 - a fresh copy of the features per call
                return _Plan(lambda: v3_cross_lingual(cosy, text, spk_id, common, normalise, rearm), [(spk_id, {})])
            return _Plan(
                lambda: cosy.inference_cross_lingual(text, None, zero_shot_spk_id=spk_id, **common), [(spk_id, {})]
            )
        # instruct with CosyVoice2/3: the instruction replaces the prompt transcript. With a
        # zero_shot_spk_id upstream would keep the stored transcript tokens and silently drop
        # the instruction, so the armed copy carries the instruction's tokens instead.
        instruction = f"{_V3_SYSTEM} {style}" if self.family == "v3" else style
        if not marker_added_by(cosy.frontend.frontend_instruct2, _V3_END):
            instruction += _V3_END
        tokens, length = cosy.frontend._extract_text_token(instruction)
        overrides = {"prompt_text": tokens, "prompt_text_len": length}
        return _Plan(
            lambda: cosy.inference_instruct2(text, instruction, None, zero_shot_spk_id=spk_id, **common),
            [(spk_id, overrides)],
        )

    # -- lifecycle ------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._table.clear()
            self.cosyvoice = None
        gc.collect()
