"""DFT and STFT on the IR's FFT ops, against ONNX's reference: every mode at odd, even and prime lengths, real and
complex signals, interpreted and compiled."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx.reference import ReferenceEvaluator

import cuvil

from .helpers import helper, model

# (inverse, onesided, parts of the signal: 1 real, 2 complex); ONNX's one-sided forward DFT takes a real signal, its
# one-sided inverse a complex spectrum
MODES = [(0, 0, 1), (0, 0, 2), (1, 0, 1), (1, 0, 2), (0, 1, 1), (1, 1, 2)]


def _dft_model(shape, inverse, onesided, axis=1):
    node = helper.make_node("DFT", ["x"], ["y"], inverse=inverse, onesided=onesided, axis=axis)
    return model([node], [("x", T.FLOAT, list(shape))], [("y", T.FLOAT, None)], opset=17)


def _check(proto, x, tol=2e-5):
    want = ReferenceEvaluator(proto).run(None, {"x": x})[0]
    loaded = cuvil.load_onnx(proto)
    for got in (loaded(x)[0], loaded.optimize()(x)[0]):
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol * max(1.0, float(np.abs(want).max())))


# length 1 except for the one-sided inverse, whose default output length 2 * (1 - 1) ONNX refuses
CASES = [(n, *mode) for n in (1, 7, 12, 97) for mode in MODES if n > 1 or mode[:2] != (1, 1)]


@pytest.mark.parametrize("n, inverse, onesided, parts", CASES)
def test_dft_matches_onnx_reference(n, inverse, onesided, parts):
    length = n // 2 + 1 if inverse and onesided else n
    x = np.random.default_rng(n).standard_normal((2, length, parts)).astype(np.float32)
    _check(_dft_model(x.shape, inverse, onesided), x)


def test_dft_along_an_inner_axis():
    x = np.random.default_rng(0).standard_normal((3, 5, 6, 2)).astype(np.float32)
    _check(_dft_model(x.shape, 0, 0, axis=2), x)


def test_stft_matches_onnx_reference():
    signal = np.random.default_rng(1).standard_normal((2, 50, 1)).astype(np.float32)
    node = helper.make_node("STFT", ["x", "step", "window"], ["y"], onesided=1)
    window = np.hanning(16).astype(np.float32)
    proto = model([node], [("x", T.FLOAT, list(signal.shape))], [("y", T.FLOAT, None)],
                  initializers=[("step", np.int64(4)), ("window", window)], opset=17)
    _check(proto, signal)
