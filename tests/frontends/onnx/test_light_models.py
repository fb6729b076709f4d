"""The real models shipped with onnx (onnx/backend/test/data/light) against their shipped outputs, with the
inputs ONNX's backend runner feeds them (arange(n) / n) and its tolerances.

VGG-19 and DenseNet-121 take 5-10 s each in the interpreter, so they run with CUVIL_SLOW_TESTS=1 (and in
bench/onnx_conformance.py); the other seven run always."""
from __future__ import annotations

import glob
import os

import numpy as np
import onnx
import pytest

import cuvil

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
MODELS = sorted(os.path.basename(p)[len("light_"):-len(".onnx")] for p in glob.glob(os.path.join(LIGHT, "*.onnx")))
RTOL = {"densenet121": 2e-3}
SLOW = {"vgg19", "densenet121"}


def _inputs(proto) -> list:
    init = {i.name for i in proto.graph.initializer}
    out = []
    for v in proto.graph.input:
        if v.name not in init:
            shape = tuple(d.dim_value for d in v.type.tensor_type.shape.dim)
            n = int(np.prod(shape))
            out.append((np.arange(n).reshape(shape) / n).astype(np.float32))
    return out


def test_all_nine_light_models_are_present():
    assert len(MODELS) == 9


@pytest.mark.parametrize("name", MODELS)
def test_light_model_matches_shipped_output(name):
    if name in SLOW and not os.environ.get("CUVIL_SLOW_TESTS"):
        pytest.skip("takes 5-10 s in the interpreter; set CUVIL_SLOW_TESTS=1")
    path = os.path.join(LIGHT, f"light_{name}.onnx")
    model = cuvil.load_onnx(path)
    expected = onnx.numpy_helper.to_array(onnx.load_tensor(path[:-5] + "_output_0.pb"))
    (got,) = model(*_inputs(onnx.load(path)))
    assert got.dtype == expected.dtype and got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=RTOL.get(name, 1e-3), atol=1e-7)
