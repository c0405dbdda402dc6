"""Does this machine's onnxruntime compute Kokoro's int8 graph right? Two checks, before use.

Machines of one kind differ in CPU, and onnxruntime 1.21.1-1.24.4 compute int8
``ConvInteger`` wrongly on CPUs with AVX512-VNNI / AMX-INT8 whenever the time length mod
32 is 17-31 (onnxruntime issue #26324, fixed by PR #27671): Kokoro then gives NaN, 1e30
spikes or garbled speech for about a quarter of ordinary sentences, differently per
thread count. The pinned version is right, but a wheel swapped by hand, another build or
a CPU nobody measured must not reach a listener. So:

- :func:`check_kernels` (at engine construction, 0.2-0.4 s, no model needed): one-node
  ``ConvInteger`` and ``MatMulInteger`` graphs shaped like Kokoro's, with unsigned
  weights as the loaded graph has them (:mod:`.unsigned`: its signed weights are made
  unsigned at load, because u8 x s8 products saturate on AVX2 CPUs), run at every time
  length 1-64 (every remainder mod 32, twice) at the engine's thread count and at one
  thread, compared with exact integer arithmetic (float64 matrix products of 8-bit
  integers are exact). A mismatch means the engine speaks with the espeak base instead,
  with one warning, and ``/healthz`` says why. Signed weights are not checked: the graph
  has none (u8 x s8 is wrong on every AVX2 CPU, by design of its kernel, and checking it
  turned the default voice into espeak there).
- :func:`check_outputs` (when the model loads, before its first request): short and
  ordinary sentences of every language the base speaks, including the ones a broken
  runtime failed on ("OK.", 谢谢。), through the real model; every chunk must be finite
  and in range and every sentence as long as its syllables allow
  (:mod:`lib.engines.plausible`). A failure makes the base refuse its requests (503) and
  ``/healthz`` degraded with the reason: the model version is fixed by then, so switching
  to espeak would store espeak audio under Kokoro's key.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from lib.engines.plausible import InvalidAudioError, check_duration
from lib.errors import EngineUnavailableError

if TYPE_CHECKING:
    from lib.engines.builtin.kokoro.render import KokoroBase
    from lib.text.tokens import Reading

__all__ = ["CANARY_TEXTS", "LENGTHS", "check_kernels", "check_outputs"]

_LOGGER = logging.getLogger(__name__)

#: Time lengths tried: every remainder mod 32, twice (the bug hit 17-31 and 49-63).
LENGTHS = tuple(range(1, 65))
#: (input channels, output channels, kernel, padding, dilation) of the ConvInteger checks.
_CONVS = ((512, 64, 1, 0, 1), (128, 128, 3, 1, 1))
#: (inner, outer) sizes of the MatMulInteger checks (the length is the row count).
_MATMULS = ((512, 64),)
#: Weight signedness checked: unsigned only, as the loaded graph has (:mod:`.unsigned`).
_SIGNED = (False,)
#: What the loaded model must say right: language -> (Kokoro voice, texts).
CANARY_TEXTS = {
    "zh": ("zf_xiaoxiao", ("谢谢。", "请不要把头和手伸出窗外。")),
    "en": ("af_heart", ("OK.", "Welcome back, the train is now arriving.")),
}

_kernel_verdicts: dict[int, str | None] = {}
_kernel_lock = threading.Lock()


def _one_node(
    op: str, x_shape: list[int | None], shape: tuple[int, ...], signed: bool, seed: int, **attrs: Any
) -> tuple[bytes, NDArray[Any], int]:
    """A graph of one ``op`` (x, w, x's zero point, w's zero point -> y), its 8-bit weights
    (random, fixed by ``seed``) and their zero point."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    wtype = np.int8 if signed else np.uint8
    w = rng.integers(-100 if signed else 30, 100 if signed else 220, size=shape).astype(wtype)
    wz = np.array(3 if signed else 120, dtype=wtype)
    graph = helper.make_graph(
        [helper.make_node(op, ["x", "w", "xz", "wz"], ["y"], **attrs)], "canary",
        [helper.make_tensor_value_info("x", TensorProto.UINT8, x_shape),
         helper.make_tensor_value_info("xz", TensorProto.UINT8, [])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, None)],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(wz, "wz")],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    return model.SerializeToString(), w, int(wz)


def _conv_model(cin: int, cout: int, k: int, pad: int, dil: int, signed: bool) -> tuple[bytes, NDArray[Any], int]:
    return _one_node("ConvInteger", [1, cin, None], (cout, cin, k), signed, cin * 1000 + k,
                     kernel_shape=[k], pads=[pad, pad], dilations=[dil])  # fmt: skip


def _matmul_model(inner: int, outer: int, signed: bool) -> tuple[bytes, NDArray[Any], int]:
    return _one_node("MatMulInteger", [None, inner], (inner, outer), signed, inner + outer)


def _conv_reference(x: NDArray[Any], xz: int, w: NDArray[Any], wz: int, pad: int, dil: int) -> NDArray[Any]:
    """Exact: 8-bit integers, sums far below 2**53, so float64 products are exact."""
    xi = x[0].astype(np.float64) - xz
    wi = w.astype(np.float64) - wz
    cout, _, k = w.shape
    xp = np.pad(xi, ((0, 0), (pad, pad)))
    length = xp.shape[1] - dil * (k - 1)
    out = np.zeros((cout, max(length, 0)))
    for j in range(k):
        out += wi[:, :, j] @ xp[:, j * dil : j * dil + length]
    return out[None]


def _session(data: bytes, threads: int) -> Any:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(data, sess_options=options, providers=["CPUExecutionProvider"])


Runner = Callable[[Any, dict[str, Any]], Any]


def _run(session: Any, feeds: dict[str, Any]) -> Any:
    return session.run(None, feeds)[0]


Case = tuple[str, bytes, list[tuple[dict[str, Any], NDArray[Any]]]]


def _cases() -> list[Case]:
    """Every check: its name, its one-node graph, and (inputs, exact output) per length."""
    rng = np.random.default_rng(7)
    cases: list[Case] = []
    for cin, cout, k, pad, dil in _CONVS:
        for signed in _SIGNED:
            data, w, wz = _conv_model(cin, cout, k, pad, dil, signed)
            runs = []
            for length in LENGTHS:
                x = rng.integers(0, 256, size=(1, cin, length)).astype(np.uint8)
                xz = int(rng.integers(0, 256))
                runs.append(({"x": x, "xz": np.array(xz, dtype=np.uint8)}, _conv_reference(x, xz, w, wz, pad, dil)))
            cases.append((f"ConvInteger {cin}->{cout} k{k} {'s8' if signed else 'u8'}", data, runs))
    for inner, outer in _MATMULS:
        for signed in _SIGNED:
            data, w, wz = _matmul_model(inner, outer, signed)
            runs = []
            for length in LENGTHS:
                x = rng.integers(0, 256, size=(length, inner)).astype(np.uint8)
                xz = int(rng.integers(0, 256))
                want = (x.astype(np.float64) - xz) @ (w.astype(np.float64) - wz)
                runs.append(({"x": x, "xz": np.array(xz, dtype=np.uint8)}, want))
            cases.append((f"MatMulInteger {inner}x{outer} {'s8' if signed else 'u8'}", data, runs))
    return cases


def _mismatches(cases: list[Case], threads: int, run: Runner) -> list[str]:
    found: list[str] = []
    for name, data, runs in cases:
        session = _session(data, threads)
        bad = []
        for length, (feeds, want) in zip(LENGTHS, runs, strict=True):
            got = np.asarray(run(session, feeds))
            if got.shape != want.shape or not np.array_equal(got.astype(np.float64), want):
                bad.append(length)
        if bad:
            found.append(f"{name} at lengths {_span(bad)}")
    return found


def _span(lengths: list[int]) -> str:
    shown = ", ".join(str(n) for n in lengths[:8])
    return shown + (f" and {len(lengths) - 8} more" if len(lengths) > 8 else "")


def check_kernels(threads: int, *, run: Runner = _run) -> str | None:
    """None when this onnxruntime computes int8 convolutions and products exactly at
    ``threads`` intra-op threads and at one; else what it got wrong (one sentence).
    Once per process per thread count (``run`` given: always, for tests)."""
    import onnxruntime as ort

    counts = sorted({1, max(1, threads)})
    with _kernel_lock:
        if run is _run and threads in _kernel_verdicts:
            return _kernel_verdicts[threads]
        problems: list[str] = []
        try:
            cases = _cases()
            for n in counts:
                problems += [f"{p} ({n} thread{'s' if n > 1 else ''})" for p in _mismatches(cases, n, run)]
        except Exception as exc:  # a runtime that cannot even run the check is not trusted
            problems.append(f"the check itself failed: {type(exc).__name__}: {exc}")
        verdict = None
        if problems:
            verdict = (
                f"onnxruntime {ort.__version__} computes int8 arithmetic wrongly on this CPU: "
                + "; ".join(problems[:3])
                + (f"; and {len(problems) - 3} more" if len(problems) > 3 else "")
                + " (onnxruntime 1.21.1-1.24.4 on AVX512-VNNI/AMX CPUs: install requirements.txt's pinned version)"
            )
        if run is _run:
            _kernel_verdicts[threads] = verdict
        return verdict


def check_outputs(base: KokoroBase, read: Callable[[str], Reading]) -> str | None:
    """None when the loaded model says every canary text plausibly; else why not."""
    for language, (voice, texts) in CANARY_TEXTS.items():
        if voice not in base.voices.names:
            continue
        for text in texts:
            try:
                sentences = base.sentences(read(text))
                if not sentences:
                    return f"{language}: {text!r} gave no sentence to say"
                for sentence in sentences:
                    audio, _ = base.say(sentence, voice, 1.0)
                    check_duration(audio.size / base.sample_rate, sentence.syllables, 1.0, f"{text!r}")
            except InvalidAudioError as exc:
                return f"{language}: {text!r}: {exc}"
            except EngineUnavailableError as exc:
                # A damaged voice file: the requests in that voice say so themselves.
                _LOGGER.warning("the load-time check skipped %s: %s", language, exc)
                break
    return None
