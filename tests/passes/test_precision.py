"""lower-float-precision (cuvil/passes/precision.py): GEMM weights to bf16 / f16 once, read through a cast; every
other op untouched. Before/after IR, verified after the pass, outputs within the rounding of the weights."""
import ml_dtypes
import numpy as np
import pytest

from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType
from cuvil.ir.printer import print_module
from cuvil.passes import PassManager, Pipeline
from cuvil.passes.precision import KEPT_FP32, LowerFloatPrecision
from cuvil.ops import registry

from .helpers import body, expect

W = np.array([[1.5, 2.0, -3.0], [0.1, 1e5, 7.0]], np.float32)


def _module(weight, transposed=False, tail=None):
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (2, weight.shape[0] if not transposed else 3))], ["x"])
    w = b.constant(weight, "w")
    y = b.matmul(b.args[0], b.transpose(w, perm=(1, 0)) if transposed else w)
    b.ret(tail(b, y) if tail else y)
    return m


def _lower(m, dtype="bf16"):
    PassManager(verify=True).run(Pipeline("test", [LowerFloatPrecision(dtype)]), m)
    return m


def test_weight_becomes_a_bf16_constant_read_through_a_cast():
    m = _lower(_module(W.T.copy()))
    assert body(m) == expect("""
        %0:bf16[3,2] = constant {name = "w_bf16"}
        %1:f32[3,2] = cast %0 {dtype = f32}
        %2:f32[2,2] = matmul %x, %1
        return %2""")
    assert list(m.constants) == ["w_bf16"]  # the f32 weight is gone
    np.testing.assert_array_equal(m.constants["w_bf16"], W.T.astype(ml_dtypes.bfloat16))


def test_transposed_weight_is_stored_k_by_n():
    m = _lower(_module(W, transposed=True))
    assert "transpose" not in body(m)
    np.testing.assert_array_equal(m.constants["w_bf16"].astype(np.float32), W.T.astype(ml_dtypes.bfloat16))


def test_outputs_move_by_the_weights_rounding_only():
    x = np.random.default_rng(0).standard_normal((2, 3)).astype(np.float32)
    ref = interpret(_module(W, transposed=True), [x])[0]
    for dtype, rtol in (("bf16", 2 ** -8), ("f16", 2 ** -11)):
        got = interpret(_lower(_module(W, transposed=True), dtype), [x])[0]
        np.testing.assert_allclose(got, ref, rtol=rtol * 4, atol=rtol * 4 * np.abs(ref).max())


def test_fp16_keeps_a_weight_beyond_its_range_in_fp32():
    m = _lower(_module(W * 1e3, transposed=True), "f16")
    assert "cast" not in body(m) and m.constants["w"].dtype == np.float32


def test_softmax_and_reductions_stay_fp32():
    def tail(b, y):
        return b.reduce_sum(b.exp(b.softmax(y, axis=-1)), axes=(1,), keepdims=False)
    m = _lower(_module(W, transposed=True, tail=tail))
    text = print_module(m)
    assert "bf16" not in text.split("matmul")[1]  # nothing after the GEMM is touched
    assert all(registry.has_op(name) for name in KEPT_FP32)


def test_a_weight_that_is_an_argument_is_left_alone():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (2, 3)), TensorType("f32", (3, 4))], ["x", "w"])
    b.ret(b.matmul(*b.args))
    before = body(m)
    assert body(_lower(m)) == before


def test_only_16_bit_float_types():
    with pytest.raises(ValueError, match="bf16 or f16"):
        LowerFloatPrecision("i8")
