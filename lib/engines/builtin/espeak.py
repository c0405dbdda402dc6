"""A small ctypes binding to libespeak-ng 1.52 as bundled by the ``espeakng-loader`` wheel.

Why reload the library for every utterance: espeak-ng is not bit-reproducible across
calls in one process, while a fresh process is (given a fixed random seed, which the
worker sets after ``espeak_Initialize``: see ``_espeak_worker.py``). Seeding the random
generator alone does not help, and neither does ``espeak_Terminate`` +
``espeak_Initialize``. Comparing the library's ``.data``/``.bss``
before and after an utterance (through its symbol table) shows why: the wave generator
keeps static state that nothing resets -- the pitch-flutter table index ``Flutter_ix``,
the glottal phase and pitch in ``wdata``/``phaseinc``/``cycle_samples``, the echo ring
buffer ``echo_buf``/``echo_head``/``echo_tail`` and the amplitude smoothers. Each
utterance therefore starts where the previous one stopped, so sample lengths and values
drift. There is no API for any of that, so every utterance runs in a fresh fork of an
idle worker process (``_espeak_worker.py``) that loads the library and speaks once:
every utterance starts from the same memory image, for a few milliseconds of fork,
``dlopen`` and ``espeak_Initialize``.

espeak-ng keeps global state, so every call is serialised by one lock per instance, and
each instance has its own worker.
"""

from __future__ import annotations

import json
import logging
import os
import struct
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lib.errors import EngineError, EngineUnavailableError

__all__ = ["ESPEAK_SAMPLE_RATE", "EspeakParams", "EspeakSynth"]

_LOGGER = logging.getLogger(__name__)

#: Rate of the audio espeak-ng delivers in synchronous mode.
ESPEAK_SAMPLE_RATE = 22_050

_WORKER = Path(__file__).with_name("_espeak_worker.py")


@dataclass(frozen=True)
class EspeakParams:
    """Prosody parameters of one espeak-ng call, in espeak's own units."""

    voice: str
    """espeak voice name with optional variant, e.g. ``cmn+f2``."""
    rate: int = 175
    """Words per minute, 80-450."""
    pitch: int = 50
    """Base pitch 0-100 (50 is the voice's default)."""
    range: int = 50
    """Pitch range 0-100 (50 is the voice's default, 0 monotone)."""
    volume: int = 100
    """Amplitude 0-200."""


class EspeakSynth:
    """Serialised, reproducible access to libespeak-ng through a worker process."""

    def __init__(self) -> None:
        try:
            import espeakng_loader
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EngineUnavailableError(
                "the builtin engine needs the espeakng-loader package; pip install espeakng-loader==0.2.4"
            ) from exc
        self._argv = [sys.executable, "-I", str(_WORKER), espeakng_loader.get_library_path(),
                      espeakng_loader.get_data_path()]  # fmt: skip
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._closed = False
        self.version = self._call({"op": "info"}).decode("ascii", "replace")

    def _call(self, request: dict[str, object]) -> bytes:
        body = json.dumps(request, ensure_ascii=False).encode("utf-8")
        with self._lock:
            if self._closed:
                raise EngineError("the builtin engine is closed")
            for attempt in (1, 2):
                proc = self._worker()
                try:
                    assert proc.stdin is not None and proc.stdout is not None
                    proc.stdin.write(struct.pack("<I", len(body)) + body)
                    proc.stdin.flush()
                    head = proc.stdout.read(8)
                    if len(head) != 8:
                        raise EOFError
                    status, size = struct.unpack("<II", head)
                    payload = proc.stdout.read(size)
                    if len(payload) != size:
                        raise EOFError
                except (EOFError, OSError) as exc:
                    _LOGGER.warning("espeak-ng worker died (attempt %d): %s", attempt, exc)
                    self._stop()
                    if attempt == 2:
                        raise EngineError("espeak-ng worker process failed; see the log") from exc
                    continue
                if status != 0:
                    raise EngineError(payload.decode("utf-8", "replace"))
                return payload
        raise EngineError("espeak-ng worker process failed")  # pragma: no cover - loop always returns

    def _worker(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(
                self._argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                env={k: v for k, v in os.environ.items() if not k.startswith("PYTHON")},
            )  # fmt: skip
        return self._proc

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def synth(self, text: str, params: EspeakParams) -> NDArray[Any]:
        """Speak ``text`` with ``params``; int16 mono at :data:`ESPEAK_SAMPLE_RATE`.

        Bit-identical for identical arguments, in any process, at any time."""
        payload = self._call(
            {"op": "synth", "text": text, "voice": params.voice, "rate": params.rate, "pitch": params.pitch,
             "range": params.range, "volume": params.volume}
        )  # fmt: skip
        return np.frombuffer(payload, dtype="<i2").astype(np.int16)

    def ipa(self, texts: list[str], voice: str = "en-us") -> list[str]:
        """espeak-ng's IPA of each text in ``voice``, multi-letter phonemes tied with
        ``^`` (``a^ɪ``), stress marks kept, clauses joined by a space. One worker call for
        the whole list; as reproducible as :meth:`synth`."""
        if not texts:
            return []
        payload = self._call({"op": "ipa", "voice": voice, "items": list(texts)})
        out = json.loads(payload.decode("utf-8"))
        if not isinstance(out, list) or len(out) != len(texts):
            raise EngineError("espeak-ng worker answered the IPA request with the wrong number of items")
        return [str(item) for item in out]

    def close(self) -> None:
        """Stop the worker; later calls raise :class:`EngineError`."""
        with self._lock:
            self._closed = True
            self._stop()
