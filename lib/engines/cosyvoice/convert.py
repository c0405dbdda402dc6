"""Voice conversion (speech to speech) through upstream's ``inference_vc``, on cached voices.

Upstream's ``inference_vc(source, prompt)`` runs the whole prompt frontend (speech tokens,
speech features, speaker embedding of the prompt) on every call. Here the prompt half comes
from the voice's cached features instead, exactly as ``zero_shot_spk_id`` does for
text-to-speech: the frontend's ``frontend_vc`` is bound, for one call, to a version that
extracts only the *source's* speech tokens. The rest is upstream's code: ``inference_vc``,
``model.tts`` with the source tokens in place of the LLM's, the flow and the vocoder.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

__all__ = ["prompt_half", "restored_prompt"]

_LOGGER = logging.getLogger(__name__)

_KEYS = ("flow_prompt_speech_token", "flow_prompt_speech_token_len", "prompt_speech_feat", "prompt_speech_feat_len")


def prompt_half(torch: Any, features: dict[str, Any]) -> dict[str, Any]:
    """The prompt part of ``frontend_vc``'s output, from stored features: a prompt voice (or
    a preset saved from a prompt) gives its speech tokens, features and embedding; a preset
    that is only an embedding (CosyVoice-300M-SFT) gives an empty prompt, as ``inference_sft``
    does."""
    if all(key in features for key in _KEYS):
        half = {key: features[key] for key in _KEYS}
        half["flow_embedding"] = features.get("flow_embedding", features.get("embedding"))
        return half
    embedding = features.get("flow_embedding", features.get("embedding"))
    if embedding is None:
        raise KeyError("the voice has neither prompt features nor a speaker embedding")
    device = embedding.device
    return {
        "flow_prompt_speech_token": torch.zeros(1, 0, dtype=torch.int32, device=device),
        "flow_prompt_speech_token_len": torch.zeros(1, dtype=torch.int32, device=device),
        "prompt_speech_feat": torch.zeros(1, 0, 80, device=device),
        "prompt_speech_feat_len": torch.zeros(1, dtype=torch.int32, device=device),
        "flow_embedding": embedding,
    }


@contextlib.contextmanager
def restored_prompt(frontend: Any, half: dict[str, Any]) -> Iterator[list[int]]:
    """For the duration, ``frontend.frontend_vc`` extracts the source's speech tokens only
    and takes the prompt part from ``half``; yields a list that receives the number of
    source tokens of each call (for callers that check the source was heard)."""
    heard: list[int] = []

    def frontend_vc(source: Any, prompt: Any, resample_rate: int) -> dict[str, Any]:
        tokens, length = frontend._extract_speech_token(source)
        heard.append(int(tokens.shape[1]))
        return {"source_speech_token": tokens, "source_speech_token_len": length, **half}

    frontend.frontend_vc = frontend_vc
    try:
        yield heard
    finally:
        del frontend.frontend_vc  # the class's own method again
