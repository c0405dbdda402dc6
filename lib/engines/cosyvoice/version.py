"""The CosyVoice engine's model version: everything that changes the audio, in one tag.

The model version is part of every cache key and every cache tag. Two processes (or two
replicas sharing one Redis) give the same key for a request only if they would give the same
audio, so the version covers, besides the weights:

- the model family and the ``-Instruct`` flag (the same files behave differently);
- the code: source and commit or version, and a digest of the code as loaded;
- the text normaliser the frontend really runs (``ttsfrd``, ``wetext`` or ``none``), since
  "3号窗口" becomes different words with each;
- the numerics: torch version, device type (``cpu``/``cuda``) and effective half precision
  (upstream silently turns fp16 off without CUDA, so the *effective* value counts);
- the synthesis path: upstream's own streaming or the per-segment path.

The tag stays short (``v2-1a2b3c4d5e6f``); :meth:`VersionParts.describe` lists the parts for
logs, the README and operators comparing replicas.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass

from lib.engines.cosyvoice.modeldir import ModelDir, fingerprint
from lib.engines.cosyvoice.reading import VERSION as READING_VERSION

__all__ = ["VersionParts", "model_version"]

_LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class VersionParts:
    """What besides the model files decides the audio."""

    family: str
    """``300m``, ``v2`` or ``v3``."""
    instruct: bool
    """An ``-Instruct`` model directory (300M-Instruct)."""
    code: str
    """``<source>[@commit|-version]#<digest>`` of the CosyVoice code (see ``upstream.code_identity``)."""
    normaliser: str
    """``ttsfrd``, ``wetext`` or ``none``: the text normaliser the frontend runs."""
    torch: str
    """torch version."""
    device: str
    """Device type the model runs on: ``cpu`` or ``cuda``."""
    fp16: bool
    """Effective half precision (after upstream's own CUDA check)."""
    stream: str
    """``native`` (upstream ``stream=True`` chunks) or ``segments`` (one call per text segment)."""
    reading: str = READING_VERSION
    """How a reading becomes the text CosyVoice reads (:mod:`lib.engines.cosyvoice.reading`)."""

    def variant(self) -> str:
        """Canonical serialisation, hashed with the model files into the fingerprint."""
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    def describe(self) -> str:
        return ", ".join(f"{key}={value}" for key, value in asdict(self).items())


def model_version(model: ModelDir, parts: VersionParts, memo_file: str | os.PathLike[str] | None = None) -> str:
    """``<family>-<12 hex digits>`` over the model files and ``parts``."""
    return f"{parts.family}-{fingerprint(model, parts.variant(), memo_file)}"
