"""lib.audio.resample: scipy's resample_poly, sample for sample, whole or in any pieces."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.signal import resample_poly

from lib.audio.resample import Resampler, resample


def scipy_reference(x: np.ndarray, rate_in: int, rate_out: int) -> np.ndarray:
    g = math.gcd(rate_in, rate_out)
    y = resample_poly(x.astype(np.float64), rate_out // g, rate_in // g)
    return np.clip(np.rint(y), -32768, 32767).astype(np.int16)


@pytest.mark.parametrize(
    ("rate_in", "rate_out"), [(22_050, 24_000), (22_050, 48_000), (24_000, 22_050), (48_000, 24_000), (16_000, 16_000)]
)
def test_whole_and_pieces_equal_scipy(rate_in: int, rate_out: int) -> None:
    rng = np.random.default_rng(7)
    x = np.clip(rng.normal(0, 6000, 9_001), -32768, 32767).astype(np.int16)
    expected = scipy_reference(x, rate_in, rate_out)
    assert np.array_equal(resample(x, rate_in, rate_out), expected)
    r = Resampler(rate_in, rate_out)
    pieces, at = [], 0
    for size in [1, 2, 3, 500, 7, 2048, 1, 4000, 10_000]:
        pieces.append(r.push(x[at : at + size]))
        at += size
    pieces.append(r.flush())
    assert np.array_equal(np.concatenate(pieces), expected)  # the same bytes, however cut


def test_output_comes_as_input_arrives() -> None:
    r = Resampler(22_050, 24_000)
    first = r.push(np.ones(2_205, dtype=np.int16) * 1000)
    assert 2_300 < first.size <= 2_400  # all but the filter's lookahead (about 10 input samples)
    assert r.flush().size < 20
    with pytest.raises(RuntimeError):
        r.push(np.zeros(1, dtype=np.int16))
