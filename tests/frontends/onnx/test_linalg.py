"""ONNX `Det` through Cuvil: ONNX's own node tests (test_det_2d, test_det_nd), interpreted and compiled, and a
singular and an empty matrix against NumPy."""
import warnings

import numpy as np
import onnx
import pytest
from onnx import helper

import cuvil


def _det_cases() -> list:
    from onnx.backend.test.case import node

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import onnx.backend.test.case.node.det  # noqa: F401 (generates the cases)
    return [c for c in node._NodeTestCases if c.name.startswith("test_det")]


def _load(model, target: str):
    """The model interpreted, or compiled for `target`."""
    loaded = cuvil.load_onnx(model)
    return loaded if target == "interpreter" else loaded.optimize(target)


@pytest.mark.parametrize("target", ["interpreter", "cpu"])
@pytest.mark.parametrize("case", _det_cases(), ids=lambda c: c.name)
def test_onnx_det_node_case(case, target):
    model = _load(case.model, target)
    for inputs, expected in case.data_sets:
        (got,) = model(*[onnx.numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else x for x in inputs])
        (want,) = [onnx.numpy_helper.to_array(x) if isinstance(x, onnx.TensorProto) else x for x in expected]
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _det_model(shape):
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, shape)
    y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Det", ["x"], ["y"])], "det", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 22)])


@pytest.mark.parametrize("target", ["interpreter", "cpu"])
def test_onnx_det_singular_batch_and_sizes(target):
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 7):
        x = rng.standard_normal((4, n, n)).astype(np.float32)
        x[0, -1] = x[0, 0]  # two equal rows (a single row for n = 1: det is that element)
        (got,) = _load(_det_model([4, n, n]), target)(x)
        np.testing.assert_allclose(got, np.linalg.det(x.astype(np.float64)), rtol=1e-5, atol=1e-5)
        if n > 1:
            assert got[0] == 0
