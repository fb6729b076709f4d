"""A node of a custom ONNX domain bridged to an op declared with `cuvil.register_op(..., onnx_op=...)`."""
from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

import cuvil  # noqa: E402
from cuvil.ops import Attr, registry, same_as_operand  # noqa: E402


@pytest.fixture
def add_relu():
    op = cuvil.register_op("test_onnx_add_relu", operands=2, shape=same_as_operand, traits={"elementwise"},
                           attrs={"shift": Attr("float", 0.0)},
                           reference=lambda xs, a: np.maximum(xs[0] + xs[1] + a["shift"], 0),
                           c_expr="fmaxf({0} + {1}, 0.0f)", onnx_op="com.example::AddRelu", replace=True)
    yield op
    registry._REGISTRY.pop(op.name, None)


def _model(shift=None):
    attrs = {} if shift is None else {"shift": shift}
    nodes = [helper.make_node("Mul", ["x", "x"], ["sq"]),
             helper.make_node("AddRelu", ["sq", "b"], ["r"], domain="com.example", **attrs),
             helper.make_node("Sigmoid", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4]),
                                           helper.make_tensor_value_info("b", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.example", 1)])


def _expected(x, b, shift=0.0):
    return 1 / (1 + np.exp(-np.maximum(x * x + b + shift, 0)))


def test_a_custom_domain_node_compiles_and_matches(add_relu):
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    b = np.array([-1.0, 0.0, 0.5, -3.0], np.float32)
    model = cuvil.load_onnx(_model().SerializeToString())
    np.testing.assert_allclose(model(x=x, b=b)[0], _expected(x, b), rtol=1e-5, atol=1e-6)
    compiled = model.optimize()
    np.testing.assert_allclose(compiled(x=x, b=b)[0], _expected(x, b), rtol=1e-5, atol=1e-6)
    assert "test_onnx_add_relu" in cuvil.inspect_ir(compiled)


def test_node_attributes_become_the_ops_attributes(add_relu):
    x = np.ones((2, 4), np.float32)
    b = np.zeros(4, np.float32)
    model = cuvil.load_onnx(_model(shift=-1.5).SerializeToString())  # the interpreter runs the reference
    np.testing.assert_allclose(model(x=x, b=b)[0], _expected(x, b, -1.5), rtol=1e-6)


def test_an_undeclared_custom_domain_node_is_named():
    with pytest.raises(cuvil.UnsupportedError, match="com.example"):
        cuvil.load_onnx(_model().SerializeToString())
