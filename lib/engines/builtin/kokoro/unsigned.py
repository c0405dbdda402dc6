"""Kokoro's signed 8-bit weights made unsigned, so that its integer products are exact on every CPU.

The int8 graph has 148 ``MatMulInteger`` nodes and 6 ``DynamicQuantizeLSTM`` nodes whose
weights are signed 8-bit (activations are unsigned: u8 x s8 products). On CPUs without
AVX512-VNNI (AVX2 only; measured on an AMD EPYC with onnxruntime 1.32.0) onnxruntime
multiplies u8 x s8 with ``vpmaddubsw``, which adds the two products of a pair in a
*saturating* 16-bit integer: a pair beyond 32767 is cut. A one-node ``MatMulInteger``
(512 x 64) with weights in +-100 and activations in 0-255 came out wrong at every length,
up to 12 % off (weights in +-127: 25 %; weights in +-20: exact). Kokoro's own activations
did not reach it in the sentences tried, but nothing bounds them, and the load-time check
(:mod:`.canary`) rightly refused such a runtime, so the default voice was espeak on every
AVX2 machine.

A weight ``w`` with zero point ``z`` (s8) is the same integer as ``w + 128`` with zero
point ``z + 128`` (u8), and u8 x u8 products run on kernels that widen to 16 bits first:
exact on every CPU. So the graph is loaded with those weights and zero points made
unsigned (:func:`unsigned_weights`, 0.6 s at load). The integers are unchanged, so on a CPU
whose u8 x s8 products were exact the audio is bit-identical (4 sentences, Mandarin and
English, compared on this machine, where Kokoro's sentences did not saturate); where they
were not, it is now exact.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from lib.errors import EngineError

__all__ = ["WEIGHT_INPUTS", "make_unsigned", "signed_weights", "unsigned_weights"]

_LOGGER = logging.getLogger(__name__)

#: (op, input index of a weight, input index of its zero point) for every integer op whose
#: weights may be signed. ``MatMulInteger``: A, B, a_zero_point, b_zero_point.
#: ``DynamicQuantizeLSTM``: X, W, R, B, sequence_lens, initial_h, initial_c, P, W_scale,
#: W_zero_point, R_scale, R_zero_point.
WEIGHT_INPUTS: dict[str, tuple[tuple[int, int], ...]] = {
    "MatMulInteger": ((1, 3),),
    "DynamicQuantizeLSTM": ((1, 9), (2, 11)),
}


def signed_weights(model: object) -> list[str]:
    """Names of the weights and zero points of :data:`WEIGHT_INPUTS` that are signed 8-bit
    (an ``onnx.ModelProto``); [] when every integer product is u8 x u8."""
    from onnx import TensorProto

    inits = {t.name: t for t in model.graph.initializer}  # type: ignore[attr-defined]
    found: list[str] = []
    for node in model.graph.node:  # type: ignore[attr-defined]
        for w_at, z_at in WEIGHT_INPUTS.get(node.op_type, ()):
            for at in (w_at, z_at):
                name = node.input[at] if at < len(node.input) else ""
                if name in inits and inits[name].data_type == TensorProto.INT8 and name not in found:
                    found.append(name)
    return found


def unsigned_weights(data: bytes) -> bytes:
    """The serialised graph ``data`` with its signed weights made unsigned
    (:func:`make_unsigned`), serialised again."""
    import onnx

    model = onnx.load_from_string(data)
    make_unsigned(model)
    return bytes(model.SerializeToString())


def make_unsigned(model: Any) -> None:
    """Make every signed weight of :data:`WEIGHT_INPUTS` in ``model`` (an
    ``onnx.ModelProto``, changed in place) and its zero point unsigned (+128); a
    ``MatMulInteger`` without a weight zero point gets one of 128. Raises
    :class:`EngineError` if a weight is not a stored tensor (it could not be rewritten,
    and would stay u8 x s8)."""
    from onnx import TensorProto, numpy_helper

    inits = {t.name: t for t in model.graph.initializer}
    done: set[str] = set()
    added = 0
    for node in model.graph.node:
        for w_at, z_at in WEIGHT_INPUTS.get(node.op_type, ()):
            weight = node.input[w_at]
            tensor = inits.get(weight)
            if tensor is None:
                raise EngineError(f"the Kokoro graph's {node.op_type} {node.name!r} has a weight that is not stored")
            if tensor.data_type != TensorProto.INT8 and weight not in done:
                continue
            zero = node.input[z_at] if z_at < len(node.input) else ""
            if not zero:
                # No zero point: 0 in s8 is 128 in u8 (one per weight; MatMulInteger only).
                zero = f"{weight}.zero_point_u8"
                while len(node.input) < z_at:
                    node.input.append("")
                node.input.append(zero)
                if zero not in inits:
                    model.graph.initializer.append(numpy_helper.from_array(np.array(128, dtype=np.uint8), zero))
                    inits[zero] = model.graph.initializer[-1]  # (append stores a copy)
                    done.add(zero)
                    added += 1
            for name in (weight, zero):
                held = inits[name]
                if name in done or held.data_type != TensorProto.INT8:
                    continue
                shifted = (numpy_helper.to_array(held).astype(np.int16) + 128).astype(np.uint8)
                held.CopyFrom(numpy_helper.from_array(shifted, name))
                done.add(name)
    left = signed_weights(model)
    if left:  # pragma: no cover - a zero point shared with a tensor of another role
        raise EngineError(f"the Kokoro graph keeps signed weights the loader cannot rewrite: {', '.join(left[:3])}")
    _LOGGER.debug("Kokoro graph: %d signed tensors made unsigned (%d zero points added)", len(done), added)
