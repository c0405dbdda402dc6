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

import contextlib
import hashlib
import json
import logging
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lib.errors import EngineError, EngineTimeoutError, EngineUnavailableError

__all__ = ["ESPEAK_SAMPLE_RATE", "EspeakParams", "EspeakSynth", "call_deadline"]

_LOGGER = logging.getLogger(__name__)

#: Rate of the audio espeak-ng delivers in synchronous mode.
ESPEAK_SAMPLE_RATE = 22_050

_WORKER = Path(__file__).with_name("_espeak_worker.py")

#: Reply status of the worker for a child that died (``_espeak_worker._STATUS_CRASHED``).
_STATUS_CRASHED = 4
#: Deadline of one espeak-ng call: this many seconds plus :data:`_DEADLINE_PER_CHAR` per
#: character. espeak-ng reads about 650 times faster than real time, and a call with its
#: fork, ``dlopen`` and initialisation takes about 20 ms for 600 characters (measured), so
#: these are hundreds of times what a healthy call needs even on a loaded machine; the
#: service's watchdog (``watchdog:`` in config.yaml) may end a call sooner.
_DEADLINE_BASE = 10.0
_DEADLINE_PER_CHAR = 0.02
#: Deadline of the ``info`` call at start (Python start-up of the worker included).
_INFO_DEADLINE = 60.0
#: Requests that crashed espeak-ng, remembered (by digest) to refuse them at once.
_POISON_MEMORY = 1024


def call_deadline(text: str) -> float:
    """Seconds one espeak-ng call on ``text`` may take before its worker is killed."""
    return _DEADLINE_BASE + _DEADLINE_PER_CHAR * len(text)


def _write_all(pipe: Any, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[pipe.write(view) :]


class _Silent(Exception):
    """The worker sent nothing before the deadline."""


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
    """Serialised, reproducible access to libespeak-ng through a worker process.

    Every call has a deadline (:func:`call_deadline`): the reply is read with ``poll``,
    so a worker that dies is seen at once (end of file) and one that goes silent is
    killed, with its whole process group, when the deadline passes; either way the lock
    is released and the next call starts a fresh worker. A text that crashed espeak-ng
    is remembered (:data:`_POISON_MEMORY` of them) and refused at once the next time,
    without running it again: it would crash the same way (a fresh fork per call)."""

    def __init__(self, argv: list[str] | None = None) -> None:
        if argv is None:
            try:
                import espeakng_loader
            except ImportError as exc:  # pragma: no cover - depends on the install
                raise EngineUnavailableError(
                    "the builtin engine needs the espeakng-loader package; pip install espeakng-loader==0.2.4"
                ) from exc
            argv = [sys.executable, "-I", str(_WORKER), espeakng_loader.get_library_path(),
                    espeakng_loader.get_data_path()]  # fmt: skip
        self._argv = argv
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._closed = False
        self._poison: OrderedDict[bytes, str] = OrderedDict()
        self.restarts = 0
        """Workers stopped because they died, crashed or went silent (for tests and logs)."""
        self.version = self._call({"op": "info"}, _INFO_DEADLINE).decode("ascii", "replace")

    def _call(self, request: dict[str, object], deadline: float) -> bytes:
        body = json.dumps(request, ensure_ascii=False).encode("utf-8")
        digest = hashlib.sha256(body).digest()
        with self._lock:
            if self._closed:
                raise EngineError("the builtin engine is closed")
            known = self._poison.get(digest)
            if known is not None:
                raise EngineError(f"{known} (remembered: not run again)")
            for attempt in (1, 2):
                proc = self._worker()
                try:
                    assert proc.stdin is not None
                    _write_all(proc.stdin, struct.pack("<I", len(body)) + body)
                except OSError as exc:
                    # The worker was gone before it got the request: ask a fresh one, once.
                    _LOGGER.warning("espeak-ng worker gone (attempt %d): %s", attempt, exc)
                    self._kill(proc)
                    if attempt == 2:
                        raise EngineError("espeak-ng worker process failed; see the log") from exc
                    continue
                try:
                    until = time.monotonic() + deadline
                    status, size = struct.unpack("<II", self._read(proc, 8, until))
                    payload = self._read(proc, size, until)
                except _Silent as exc:
                    self._kill(proc)
                    # Not remembered, unlike a crash: a loaded machine, not the text, may be why.
                    message = f"espeak-ng gave no answer within {deadline:.0f} s and was stopped"
                    _LOGGER.error("espeak-ng worker silent for %.1f s: killed and replaced (%s)", deadline, exc)
                    raise EngineTimeoutError(message + "; nothing was cached") from exc
                except (EOFError, OSError) as exc:
                    # Died with the request (or was interrupted): not sent again, it may be the cause.
                    _LOGGER.warning("espeak-ng worker ended during a call: %s", exc or type(exc).__name__)
                    self._kill(proc)
                    raise EngineError("espeak-ng worker process ended during the call; nothing was cached") from exc
                if status == _STATUS_CRASHED:
                    # The worker reported its child's death; start afresh all the same,
                    # in case the child took part of the next request's bytes with it.
                    message = payload.decode("utf-8", "replace")
                    self._remember(digest, message)
                    _LOGGER.error("%s: worker replaced", message)
                    self._kill(proc)
                    raise EngineError(message + "; nothing was cached")
                if status != 0:
                    raise EngineError(payload.decode("utf-8", "replace"))
                return payload
        raise EngineError("espeak-ng worker process failed")  # pragma: no cover - loop always returns

    @staticmethod
    def _read(proc: subprocess.Popen[bytes], size: int, until: float) -> bytes:
        """``size`` bytes of the worker's reply, before the monotonic time ``until``;
        ``EOFError`` when the worker's end closes first, ``_Silent`` when time is up."""
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        parts: list[bytes] = []
        got = 0
        while got < size:
            left = until - time.monotonic()
            if left <= 0 or not poller.poll(left * 1000):
                raise _Silent(f"{got} of {size} bytes of the reply read")
            chunk = os.read(fd, min(size - got, 1 << 20))
            if not chunk:
                raise EOFError(f"the worker ended after {got} of {size} bytes of the reply")
            parts.append(chunk)
            got += len(chunk)
        return b"".join(parts)

    def _remember(self, digest: bytes, message: str) -> None:
        self._poison[digest] = message
        while len(self._poison) > _POISON_MEMORY:
            self._poison.popitem(last=False)

    def _worker(self) -> subprocess.Popen[bytes]:
        if self._proc is None or self._proc.poll() is not None:
            if self._proc is not None:
                self._kill(self._proc)
            env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
            env["LIBC_FATAL_STDERR_"] = "1"  # glibc's "stack smashing detected" to stderr (discarded), not a tty
            self._proc = subprocess.Popen(
                self._argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                bufsize=0, start_new_session=True,  # its own process group: killed with its children
            )  # fmt: skip
        return self._proc

    def _kill(self, proc: subprocess.Popen[bytes]) -> None:
        """Kill the worker and the child it forked, reap it, close its pipes."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        for pipe in (proc.stdin, proc.stdout):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()
        if self._proc is proc:
            self._proc = None
        self.restarts += 1

    def interrupt(self) -> bool:
        """Kill the worker now, from any thread, without waiting for the lock: a call
        blocked on it ends at once with :class:`EngineError` (the watchdog's hook).
        True if there was a worker to kill."""
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return False
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        return True

    def _stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()

    def synth(self, text: str, params: EspeakParams, *, phonemes: bool = False) -> NDArray[Any]:
        """Speak ``text`` with ``params``; int16 mono at :data:`ESPEAK_SAMPLE_RATE`.
        ``phonemes``: ``[[...]]`` in ``text`` is espeak-ng phoneme input (see
        :func:`lib.text.espeak_input.espeak_input`).

        Bit-identical for identical arguments, in any process, at any time."""
        payload = self._call(
            {"op": "synth", "text": text, "voice": params.voice, "rate": params.rate, "pitch": params.pitch,
             "range": params.range, "volume": params.volume, "phonemes": phonemes},
            call_deadline(text),
        )  # fmt: skip
        return np.frombuffer(payload, dtype="<i2").astype(np.int16)

    def phonemes(self, text: str, voice: str) -> str:
        """espeak-ng's own phonemes for ``text`` in ``voice`` (its mnemonics, one
        clause per line): what it would say, for checks and benchmarks."""
        return self._call({"op": "phonemes", "text": text, "voice": voice}, call_deadline(text)).decode(
            "utf-8", "replace"
        )

    def ipa(self, texts: list[str], voice: str = "en-us") -> list[str]:
        """espeak-ng's IPA of each text in ``voice``, multi-letter phonemes tied with
        ``^`` (``a^ɪ``), stress marks kept, clauses joined by a space. One worker call for
        the whole list; as reproducible as :meth:`synth`."""
        if not texts:
            return []
        payload = self._call({"op": "ipa", "voice": voice, "items": list(texts)}, call_deadline(" ".join(texts)))
        out = json.loads(payload.decode("utf-8"))
        if not isinstance(out, list) or len(out) != len(texts):
            raise EngineError("espeak-ng worker answered the IPA request with the wrong number of items")
        return [str(item) for item in out]

    def close(self) -> None:
        """Stop the worker; later calls raise :class:`EngineError`. A call stuck on the
        worker is ended first (:meth:`interrupt`), so closing never waits for one."""
        self._closed = True
        self.interrupt()
        with self._lock:
            self._stop()
