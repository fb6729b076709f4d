"""MelWeightMatrix against ONNX's reference, for sizes given as initializers and as graph inputs (the model is
specialized on their values), interpreted and compiled."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx.reference import ReferenceEvaluator

import cuvil

from .helpers import helper, model

NAMES = ("num_mel_bins", "dft_length", "sample_rate", "lower_edge_hertz", "upper_edge_hertz")


def _values(bins, length, rate, low, high):
    return [np.int64(bins), np.int64(length), np.int64(rate), np.float32(low), np.float32(high)]


def _mel_model(values, as_inputs: bool, out_type=T.FLOAT):
    node = helper.make_node("MelWeightMatrix", list(NAMES), ["w"], output_datatype=out_type)
    kinds = [T.INT64, T.INT64, T.INT64, T.FLOAT, T.FLOAT]
    inputs = [(n, k, []) for n, k in zip(NAMES, kinds)] if as_inputs else []
    inits = [] if as_inputs else list(zip(NAMES, values))
    return model([node], inputs, [("w", out_type, None)], initializers=inits, opset=17)


@pytest.mark.parametrize("params", [(8, 16, 8192, 0, 4096), (10, 64, 16000, 20.0, 7600.0), (3, 10, 100, 5, 45)])
@pytest.mark.parametrize("as_inputs", [False, True])
def test_matches_onnx_reference(params, as_inputs):
    values = _values(*params)
    proto = _mel_model(values, as_inputs)
    want = ReferenceEvaluator(proto).run(None, dict(zip(NAMES, values)) if as_inputs else {})[0]
    loaded = cuvil.load_onnx(proto)
    args = values if as_inputs else []
    for got in (loaded(*args)[0], loaded.optimize()(*args)[0]):
        assert got.dtype == np.float32 and got.shape == want.shape == (params[1] // 2 + 1, params[0])
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)


def test_output_datatype_is_honoured():
    proto = _mel_model(_values(4, 32, 8000, 0, 4000), False, T.DOUBLE)
    assert cuvil.load_onnx(proto)()[0].dtype == np.float64


def test_edges_past_the_spectrum_are_refused():
    with pytest.raises(cuvil.errors.ShapeError, match="spectrum bins"):
        cuvil.load_onnx(_mel_model(_values(4, 16, 100, 0, 400), False))
