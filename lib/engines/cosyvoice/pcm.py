"""Checks of the audio going into the CosyVoice engine (prompts, convert sources) and out.

CosyVoice's speech tokenizer asserts on more than 30 s, and too short or silent audio gives
features that clone nothing; each case is refused here with a message that says what to do,
before any upstream code runs.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lib.engines.base import PROMPT_SAMPLE_RATE
from lib.errors import EngineError, PromptAudioError

__all__ = ["MAX_PROMPT_SECONDS", "MIN_PROMPT_SECONDS", "check_pcm", "output_chunk"]

_LOGGER = logging.getLogger(__name__)

#: CosyVoice's speech tokenizer refuses prompts longer than this.
MAX_PROMPT_SECONDS = 30.0
MIN_PROMPT_SECONDS = 0.5


def check_pcm(prompt_pcm: NDArray[Any], what: str = "prompt audio") -> NDArray[Any]:
    """Mono int16 at 16 kHz, 0.5-30 s, not silent -> float32 in [-1, 1]; else PromptAudioError."""
    pcm = np.asarray(prompt_pcm)
    if pcm.ndim == 2 and 1 in pcm.shape:
        pcm = pcm.reshape(-1)
    if pcm.ndim != 1 or pcm.dtype != np.int16:
        raise PromptAudioError(f"{what} must be mono 16-bit PCM at 16 kHz")
    seconds = pcm.size / PROMPT_SAMPLE_RATE
    if seconds < MIN_PROMPT_SECONDS:
        raise PromptAudioError(
            f"{what} is {seconds:.2f} s; CosyVoice needs at least "
            f"{MIN_PROMPT_SECONDS:g} s of speech (3-10 s works best)"
        )
    if seconds > MAX_PROMPT_SECONDS:
        raise PromptAudioError(
            f"{what} is {seconds:.1f} s; CosyVoice's speech tokenizer takes at most {MAX_PROMPT_SECONDS:g} s, trim it"
        )
    audio = pcm.astype(np.float32) / 32768.0
    if float(np.sqrt(np.mean(audio * audio))) < 1e-4:
        raise PromptAudioError(f"{what} is silent; record the voice closer to the microphone")
    return audio


def output_chunk(output: dict[str, Any]) -> NDArray[Any]:
    """One upstream output as mono float32 in [-1, 1]; non-finite audio is an engine error."""
    chunk = output["tts_speech"].detach().cpu().numpy().reshape(-1).astype(np.float32, copy=False)
    if not np.all(np.isfinite(chunk)):
        raise EngineError("CosyVoice produced invalid (non-finite) audio; nothing was cached")
    clipped: NDArray[Any] = np.clip(chunk, -1.0, 1.0)
    return clipped
