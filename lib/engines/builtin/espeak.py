"""A small ctypes binding to libespeak-ng 1.52 as bundled by the ``espeakng-loader`` wheel.

Why reload the library for every utterance: espeak-ng is not bit-reproducible across
calls in one process, while a fresh process is. Seeding its random generator
(``espeak_ng_SetRandSeed``) or libc's ``srand`` changes nothing, and neither does
``espeak_Terminate`` + ``espeak_Initialize``. Comparing the library's ``.data``/``.bss``
before and after an utterance (through its symbol table) shows why: the wave generator
keeps static state that nothing resets -- the pitch-flutter table index ``Flutter_ix``,
the glottal phase and pitch in ``wdata``/``phaseinc``/``cycle_samples``, the echo ring
buffer ``echo_buf``/``echo_head``/``echo_tail`` and the amplitude smoothers. Each
utterance therefore starts where the previous one stopped, so sample lengths and values
drift. There is no API for any of that, so every utterance runs in a freshly loaded
copy: ``dlclose`` (the library is not NODELETE) then ``dlopen`` re-initialises all
static data, for well under a millisecond plus about 1 ms of ``espeak_Initialize``.

The library file is copied once into a private temporary directory so that our handle
is never shared with another user of ``espeakng-loader`` in the same process (a shared
handle would not be unloaded by our ``dlclose`` and would keep the drifting state).

espeak-ng keeps global state, so every call is serialised by one lock per instance; the
private copy means two instances do not share state either.
"""

from __future__ import annotations

import _ctypes
import ctypes
import logging
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lib.errors import EngineError, EngineUnavailableError

__all__ = ["ESPEAK_SAMPLE_RATE", "EspeakParams", "EspeakSynth"]

_LOGGER = logging.getLogger(__name__)

#: Rate of the audio espeak-ng delivers in synchronous mode.
ESPEAK_SAMPLE_RATE = 22_050

_AUDIO_OUTPUT_SYNCHRONOUS = 2
_INITIALIZE_DONT_EXIT = 0x8000
_CHARS_UTF8 = 1
_POS_CHARACTER = 1
# espeak_PARAMETER values.
_RATE, _VOLUME, _PITCH, _RANGE = 1, 2, 3, 4

_Callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)


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
    """Serialised, reproducible access to libespeak-ng."""

    def __init__(self) -> None:
        try:
            import espeakng_loader
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise EngineUnavailableError(
                "the builtin engine needs the espeakng-loader package; pip install espeakng-loader==0.2.4"
            ) from exc
        source = Path(espeakng_loader.get_library_path())
        self._data_path = espeakng_loader.get_data_path().encode()
        self._tmpdir = tempfile.mkdtemp(prefix="tts-espeak-")
        self._lib_path = str(Path(self._tmpdir) / source.name)
        shutil.copyfile(source, self._lib_path)
        self._lock = threading.Lock()
        self._chunks: list[np.ndarray] = []
        # Keep a reference: ctypes callbacks must outlive every call that may use them.
        self._callback = _Callback(self._on_audio)
        self.version = self._probe_version()

    def _on_audio(self, wav: ctypes._Pointer[ctypes.c_short], count: int, events: int | None) -> int:
        if count > 0:
            self._chunks.append(np.ctypeslib.as_array(wav, shape=(count,)).copy())
        return 0

    def _load(self) -> ctypes.CDLL:
        lib = ctypes.CDLL(self._lib_path)
        lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        lib.espeak_Initialize.restype = ctypes.c_int
        lib.espeak_SetSynthCallback.argtypes = [_Callback]
        lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
        lib.espeak_SetVoiceByName.restype = ctypes.c_int
        lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
        lib.espeak_SetParameter.restype = ctypes.c_int
        lib.espeak_Synth.argtypes = [
            ctypes.c_void_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int,
            ctypes.c_uint, ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p,
        ]  # fmt: skip
        lib.espeak_Synth.restype = ctypes.c_int
        lib.espeak_Info.argtypes = [ctypes.POINTER(ctypes.c_char_p)]
        lib.espeak_Info.restype = ctypes.c_char_p
        rate = lib.espeak_Initialize(_AUDIO_OUTPUT_SYNCHRONOUS, 0, self._data_path, _INITIALIZE_DONT_EXIT)
        if rate != ESPEAK_SAMPLE_RATE:
            self._unload(lib)
            raise EngineUnavailableError(f"espeak-ng failed to initialise (returned {rate}); reinstall espeakng-loader")
        lib.espeak_SetSynthCallback(self._callback)
        return lib

    @staticmethod
    def _unload(lib: ctypes.CDLL) -> None:
        lib.espeak_Terminate()
        _ctypes.dlclose(lib._handle)

    def _probe_version(self) -> str:
        with self._lock:
            lib = self._load()
            try:
                raw = lib.espeak_Info(None)
            finally:
                self._unload(lib)
        return raw.decode("ascii", "replace") if raw else "unknown"

    def synth(self, text: str, params: EspeakParams) -> np.ndarray:
        """Speak ``text`` with ``params``; int16 mono at :data:`ESPEAK_SAMPLE_RATE`.

        Bit-identical for identical arguments, in any process, at any time."""
        data = text.encode("utf-8") + b"\0"
        with self._lock:
            if self._tmpdir is None:
                raise EngineError("the builtin engine is closed")
            lib = self._load()
            try:
                self._chunks = []
                if lib.espeak_SetVoiceByName(params.voice.encode("ascii")) != 0:
                    raise EngineError(f"espeak-ng has no voice {params.voice!r}")
                for key, value in ((_RATE, params.rate), (_PITCH, params.pitch), (_RANGE, params.range),
                                   (_VOLUME, params.volume)):  # fmt: skip
                    lib.espeak_SetParameter(key, int(value), 0)
                status = lib.espeak_Synth(data, len(data), 0, _POS_CHARACTER, 0, _CHARS_UTF8, None, None)
                if status != 0:
                    raise EngineError(f"espeak-ng failed to synthesise (status {status})")
                chunks, self._chunks = self._chunks, []
            finally:
                self._unload(lib)
        if not chunks:
            return np.zeros(0, dtype=np.int16)
        return np.concatenate(chunks).astype(np.int16, copy=False)

    def close(self) -> None:
        """Remove the private library copy; later calls raise :class:`EngineError`."""
        with self._lock:
            if self._tmpdir is not None:
                shutil.rmtree(self._tmpdir, ignore_errors=True)
                self._tmpdir = None  # type: ignore[assignment]
