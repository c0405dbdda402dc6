"""Prompt features in CosyVoice's own speaker table, under a byte budget.

CosyVoice's ``add_zero_shot_spk`` runs the prompt frontend once and stores its output
(speech tokens, speech features, speaker embedding, prompt text tokens) in
``frontend.spk2info`` under an id; every ``inference_*`` call given that
``zero_shot_spk_id`` then skips the frontend. That table grows without bound and upstream's
``save_spkinfo`` writes it over the model's ``spk2info.pt``; here it is an LRU with a byte
budget, never saved into the model directory: the features persist as the ``blob`` of the
voice profile in the app's voice cache instead.

The upstream frontend mutates the entry it is given (adds ``text``, and cross-lingual mode
deletes the prompt keys), so the table holds a fresh shallow copy for each call and the
pristine features stay here.
"""

from __future__ import annotations

import hashlib
import io
import logging
import threading
from collections import OrderedDict
from typing import Any

from lib.errors import EngineError

__all__ = ["PROMPT_PREFIX", "PromptTable", "dump_features", "load_features"]

_LOGGER = logging.getLogger(__name__)

#: Ids of prompt voices in the speaker table; preset speakers never start with it.
PROMPT_PREFIX = "_tts_prompt_"

_FORMAT = 1
_FEATURE_KEYS = frozenset(
    {
        "prompt_text", "prompt_text_len", "llm_prompt_speech_token", "llm_prompt_speech_token_len",
        "flow_prompt_speech_token", "flow_prompt_speech_token_len", "prompt_speech_feat",
        "prompt_speech_feat_len", "llm_embedding", "flow_embedding",
    }
)  # fmt: skip


def _nbytes(features: dict[str, Any]) -> int:
    total = 0
    for value in features.values():
        if hasattr(value, "element_size") and hasattr(value, "numel"):
            total += int(value.element_size() * value.numel())
    return total + 64 * len(features)


def dump_features(torch: Any, features: dict[str, Any]) -> tuple[bytes, str]:
    """Serialise prompt features (tensors only, CPU) and return (bytes, feature id)."""
    clean = {k: v.detach().cpu().contiguous() for k, v in features.items() if k in _FEATURE_KEYS}
    buffer = io.BytesIO()
    torch.save({"format": _FORMAT, "features": clean}, buffer)
    data = buffer.getvalue()
    return data, hashlib.sha256(data).hexdigest()[:24]


def load_features(torch: Any, data: bytes, device: Any) -> dict[str, Any]:
    """Inverse of :func:`dump_features`; tensors only (``weights_only``), on ``device``."""
    try:
        loaded = torch.load(io.BytesIO(data), map_location=device, weights_only=True)
    except Exception as exc:  # torch raises several types for damaged pickles
        raise EngineError(
            f"the voice profile's prompt features are damaged ({type(exc).__name__}); extract the voice again"
        ) from exc
    if not isinstance(loaded, dict) or loaded.get("format") != _FORMAT or not isinstance(loaded.get("features"), dict):
        raise EngineError("the voice profile's prompt features have an unknown format; extract the voice again")
    features: dict[str, Any] = loaded["features"]
    return features


class PromptTable:
    """LRU of prompt voices registered in ``spk2info`` (the model's speaker table)."""

    def __init__(self, spk2info: dict[str, Any], budget: int) -> None:
        self._table = spk2info
        self._budget = budget
        self._entries: OrderedDict[str, tuple[dict[str, Any], int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.loads = 0
        """How many times features were deserialised into the table (misses)."""

    @property
    def nbytes(self) -> int:
        return self._bytes

    def __contains__(self, spk_id: str) -> bool:
        with self._lock:
            return spk_id in self._entries

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def put(self, spk_id: str, features: dict[str, Any]) -> None:
        """Register ``features`` under ``spk_id`` (most recently used); evict over budget."""
        pristine = {k: v for k, v in features.items() if k in _FEATURE_KEYS}
        size = _nbytes(pristine)
        with self._lock:
            old = self._entries.pop(spk_id, None)
            if old is not None:
                self._bytes -= old[1]
            self._entries[spk_id] = (pristine, size)
            self._bytes += size
            self._table[spk_id] = dict(pristine)
            self._evict(keep=spk_id)

    def arm(self, spk_id: str) -> bool:
        """Mark ``spk_id`` used and put a fresh copy of its features in the table for one
        call; False if it is not registered."""
        with self._lock:
            entry = self._entries.get(spk_id)
            if entry is None:
                return False
            self._entries.move_to_end(spk_id)
            self._table[spk_id] = dict(entry[0])
            return True

    def features(self, spk_id: str) -> dict[str, Any] | None:
        """The pristine features registered under ``spk_id`` (not a copy: do not mutate)."""
        with self._lock:
            entry = self._entries.get(spk_id)
            return None if entry is None else entry[0]

    def clear(self) -> None:
        with self._lock:
            for spk_id in self._entries:
                self._table.pop(spk_id, None)
            self._entries.clear()
            self._bytes = 0

    def _evict(self, keep: str) -> None:
        # The entry about to be used stays even if it alone exceeds the budget.
        while self._bytes > self._budget and len(self._entries) > 1:
            spk_id, (_, size) = next(iter(self._entries.items()))
            if spk_id == keep:  # pragma: no cover - keep is always the newest
                break
            del self._entries[spk_id]
            self._bytes -= size
            self._table.pop(spk_id, None)
            _LOGGER.debug("evicted prompt voice %s from the speaker table", spk_id)
