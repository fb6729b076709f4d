"""Converters that spell an ONNX op with other IR ops, against ONNX Runtime on inputs of their own (or against
ONNX's reference evaluator where ONNX Runtime departs from the spec)."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx.reference import ReferenceEvaluator

import cuvil

from .helpers import F32, check_against_ort, helper, model, rand, run_ort

N = helper.make_node


@pytest.mark.parametrize("attrs", [
    {"mode": "linear", "antialias": 1},
    {"mode": "cubic", "antialias": 1, "exclude_outside": 1},
    {"mode": "linear", "coordinate_transformation_mode": "tf_crop_and_resize", "extrapolation_value": -1.0},
    {"mode": "linear", "coordinate_transformation_mode": "align_corners"},
    {"mode": "nearest", "coordinate_transformation_mode": "asymmetric", "nearest_mode": "floor"},
])
def test_resize_paths(attrs):
    """ONNX Runtime sizes align_corners and tf_crop_and_resize grids by the rounded output length; the spec (and
    its reference) by input length * scale, as Cuvil does."""
    roi = np.float32([0, 0, -0.1, 0.2, 1, 1, 0.9, 1.3])
    proto = model([N("Resize", ["x", "roi", "scales"], ["y"], **attrs)], [("x", F32, [1, 2, 6, 7])],
                  [("y", F32, None)], [("roi", roi), ("scales", np.float32([1, 1, 0.6, 0.45]))], opset=19)
    x = rand(1, 2, 6, 7)
    (want,) = ReferenceEvaluator(proto).run(None, {"x": x})
    np.testing.assert_allclose(cuvil.load_onnx(proto)(x)[0], want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode,padding", [("linear", "zeros"), ("nearest", "border"), ("cubic", "reflection"),
                                          ("linear", "reflection")])
def test_grid_sample(mode, padding):
    proto = model([N("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=padding, align_corners=0)],
                  [("x", F32, [2, 3, 5, 4]), ("grid", F32, [2, 6, 7, 2])], [("y", F32, None)], opset=20)
    grid = np.random.default_rng(3).uniform(-1.4, 1.4, (2, 6, 7, 2)).astype(np.float32)
    check_against_ort(proto, {"x": rand(2, 3, 5, 4), "grid": grid}, rtol=1e-4, atol=1e-5)


def test_qlinear_matmul_and_dynamic_quantize():
    nodes = [N("DynamicQuantizeLinear", ["a"], ["aq", "a_scale", "a_zp"]),
             N("QLinearMatMul", ["aq", "a_scale", "a_zp", "bq", "b_scale", "b_zp", "y_scale", "y_zp"], ["yq"]),
             N("DequantizeLinear", ["yq", "y_scale", "y_zp"], ["y"])]
    inits = [("bq", np.random.default_rng(1).integers(0, 255, (4, 3)).astype(np.uint8)), ("b_scale", np.float32(0.02)),
             ("b_zp", np.uint8(128)), ("y_scale", np.float32(0.05)), ("y_zp", np.uint8(120))]
    proto = model(nodes, [("a", F32, [2, 4])], [("y", F32, None)], inits, opset=13)
    check_against_ort(proto, {"a": rand(2, 4)})


def test_bitwise_and_shifts_on_signed_and_unsigned():
    nodes = [N("BitwiseAnd", ["a", "b"], ["and"]), N("BitwiseXor", ["a", "b"], ["xor"]),
             N("BitwiseNot", ["a"], ["not"]), N("BitShift", ["u", "s"], ["left"], direction="LEFT"),
             N("BitShift", ["u", "s"], ["right"], direction="RIGHT")]
    i32, u16 = onnx.TensorProto.INT32, onnx.TensorProto.UINT16
    outputs = [("and", i32, None), ("xor", i32, None), ("not", i32, None), ("left", u16, None), ("right", u16, None)]
    proto = model(nodes, [("a", i32, [4]), ("b", i32, [4]), ("u", u16, [4]), ("s", u16, [4])], outputs, opset=18)
    feeds = {"a": np.int32([-7, 12, 2 ** 30, -1]), "b": np.int32([5, -3, 7, 0]),
             "u": np.uint16([1, 40000, 3, 65535]), "s": np.uint16([3, 1, 15, 4])}
    check_against_ort(proto, feeds)


def test_uint64_right_shift_is_logical_and_uint32_not_stays_in_range_interpreted_and_compiled():
    """uint64 is carried in i64 by its bits: its right shift must not fill with the sign. uint32 is carried in
    i64: its BitwiseNot must stay below 2**32 for the Div that follows it, not only at the model's output."""
    T = onnx.TensorProto
    nodes = [N("BitShift", ["u", "s"], ["right"], direction="RIGHT"), N("BitShift", ["u", "s"], ["left"],
             direction="LEFT"), N("BitwiseNot", ["w"], ["not"]), N("Div", ["not", "two"], ["half"])]
    outputs = [("right", T.UINT64, None), ("left", T.UINT64, None), ("half", T.UINT32, None)]
    proto = model(nodes, [("u", T.UINT64, [6]), ("s", T.UINT64, [6]), ("w", T.UINT32, [3])], outputs,
                  [("two", np.uint32(2))], opset=18)
    feeds = {"u": np.uint64([2 ** 64 - 1, 2 ** 63 + 5, 12, 2 ** 63, 7, 2 ** 64 - 2]),
             "s": np.uint64([1, 63, 2, 0, 64, 2 ** 63 + 1]), "w": np.uint32([0, 5, 2 ** 32 - 1])}
    want = run_ort(proto, feeds)
    for run in (cuvil.load_onnx(proto), cuvil.load_onnx(proto).optimize()):
        for got, expected in zip(run(**feeds), want):
            assert got.dtype == expected.dtype
            np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("op,ref", [("Asinh", np.arcsinh), ("Sign", np.sign)])
def test_odd_functions_at_the_extremes_interpreted_and_compiled(op, ref):
    """asinh of a large negative x must not cancel to log(0) (nor -inf to NaN); sign(NaN) is NaN."""
    x = np.float32([-np.inf, -1e30, -1e8, -1e4, -3.5, 0, 1e-8, 2, 1e30, np.inf, np.nan])
    m = cuvil.load_onnx(model([N(op, ["x"], ["y"])], [("x", F32, [11])], [("y", F32, None)]))
    for run in (m, m.optimize()):
        np.testing.assert_allclose(run(x)[0], ref(x), rtol=1e-6)
