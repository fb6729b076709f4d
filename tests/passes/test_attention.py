"""FuseAttention outlines softmax(Q K^T / c [+ mask]) V into one fused library op (masks: additive f32, or torch
SDPA's where(bool, s, -inf) with its guard for rows with no key left), and leaves other patterns alone."""
import numpy as np
import pytest

from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType
from cuvil.passes import FuseAttention, run_pipeline
from cuvil.passes.manager import PipelineBuilder

SHAPE, SCORES = (2, 4, 8, 16), (2, 4, 8, 8)


def _filled(b, value, shape):
    return b.broadcast_to(b.emit("full", value=value, shape=(), dtype="f32"), shape=shape)


def attention_module(mask: str = "none", guard: bool = False, keys: int = 8, head: int = 16) -> Module:
    """softmax(Q K^T / 4 + mask) V on [2, 4, 8, head] queries and [2, 4, keys, head] keys/values; mask "none",
    "add" (an f32 input of the scores' shape) or "keep" (a bool input; where(mask, s, -inf)); `guard`: torch SDPA's
    where(max(s) == -inf, 0, softmax(s))."""
    m = Module()
    scores = (2, 4, 8, keys)
    types = [TensorType("f32", (2, 4, 8, head)), *[TensorType("f32", (2, 4, keys, head))] * 2]
    if mask != "none":
        types.append(TensorType("f32" if mask == "add" else "bool", scores))
    b = Builder.new_function(m, "main", types)
    q, k, v = b.args[:3]
    s = b.matmul(q, b.transpose(k, perm=(0, 1, 3, 2)))
    s = b.div(s, _filled(b, 4.0, scores))
    if mask == "add":
        s = b.add(s, b.args[3])
    elif mask == "keep":
        s = b.where(b.args[3], s, _filled(b, float("-inf"), scores))
    p = b.softmax(s, axis=3)
    if guard:
        empty = b.eq(b.reduce_max(s, axes=[3], keepdims=True), _filled(b, float("-inf"), (2, 4, 8, 1)))
        p = b.where(b.broadcast_to(empty, shape=scores), _filled(b, 0.0, scores), p)
    b.ret(b.matmul(p, v))
    return m


def attention_inputs(mask: str = "none", keys: int = 8, head: int = 16, seed: int = 0) -> list:
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in ((2, 4, 8, head), (2, 4, keys, head),
                                                                  (2, 4, keys, head))]
    causal = np.tril(np.ones((8, keys), bool), k=keys - 8)
    keep = np.broadcast_to(causal, (2, 4, 8, keys)).copy()
    keep[1, 2, 3, :] = False  # a row with no key left
    if mask == "add":
        inputs.append(np.where(keep, 0.0, -1e9).astype(np.float32))
    elif mask == "keep":
        inputs.append(keep)
    return inputs


def _fused(m: Module) -> list:
    pb = PipelineBuilder("attention")
    pb.add(FuseAttention())
    run_pipeline(m, pb.build())
    return [op for op in m.main.body.ops if op.name == "fused"]


@pytest.mark.parametrize("mask, guard", [("none", False), ("add", False), ("keep", True), ("none", True)])
def test_attention_becomes_one_library_op_with_the_same_result(mask, guard):
    inputs = attention_inputs(mask)
    m = attention_module(mask, guard)
    want = interpret(m, inputs)[0]
    (fused,) = _fused(m)
    assert (fused.attrs["kind"], fused.attrs["name"]) == ("library", "attention")
    assert [o.name for o in m.main.body.ops] == ["fused", "return"]
    assert len(fused.operands) == (3 if mask == "none" else 4)  # Q, K, V and the mask
    np.testing.assert_allclose(interpret(m, inputs)[0], want, rtol=1e-6, atol=1e-6)


def test_a_mask_of_another_shape_or_a_where_without_minus_inf_is_left_alone():
    m = Module()
    t = TensorType("f32", SHAPE)
    b = Builder.new_function(m, "main", [t, t, t, TensorType("bool", SCORES)])
    q, k, v, keep = b.args
    s = b.matmul(q, b.transpose(k, perm=(0, 1, 3, 2)))
    s = b.where(keep, s, _filled(b, -5.0, SCORES))  # not -inf: not a mask the kernel knows
    b.ret(b.matmul(b.softmax(s, axis=3), v))
    assert _fused(m) == []


def test_scores_used_outside_the_pattern_are_left_alone():
    m = Module()
    t = TensorType("f32", SHAPE)
    b = Builder.new_function(m, "main", [t, t, t])
    q, k, v = b.args
    s = b.matmul(q, b.transpose(k, perm=(0, 1, 3, 2)))
    b.ret(b.matmul(b.softmax(s, axis=3), v), s)
    assert _fused(m) == []


def _exported_attention(scale_in_constant: bool) -> Module:
    """The ONNX exporter's SDPA: Q and K^T each scaled by sqrt(scale), K^T regrouped by reshapes around its swap, a
    constant additive mask, softmax, where(isnan(p), 0, p); the scalars rank-0 constants when `scale_in_constant`."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", SHAPE)] * 3 + [TensorType("f32", SCORES)])
    q, k, v, mask = b.args

    def scalar(value, shape, name):
        if not scale_in_constant:
            return _filled(b, value, shape)
        return b.broadcast_to(b.constant(np.array(value, np.float32), name), shape=shape)
    kt = b.reshape(b.transpose(b.reshape(k, shape=(8, 8, 16)), perm=(0, 2, 1)), shape=(2, 4, 16, 8))
    s = b.matmul(b.mul(q, scalar(0.5, SHAPE, "sq")), b.mul(kt, scalar(0.5, (2, 4, 16, 8), "sk")))
    p = b.softmax(b.add(s, mask), axis=3)
    p = b.where(b.isnan(p), scalar(0.0, SCORES, "zero"), p)
    b.ret(b.matmul(p, v))
    return m


@pytest.mark.parametrize("scale_in_constant", [False, True])
def test_the_onnx_exporters_attention_is_one_library_op(scale_in_constant):
    m = _exported_attention(scale_in_constant)
    rng = np.random.default_rng(3)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in (SHAPE, SHAPE, SHAPE, SCORES)]
    inputs[3][0, 1, 2, :] = -np.inf  # a row with no key left: NaN, then 0 through the isnan guard
    want = interpret(m, inputs)[0]
    (fused,) = [op for op in _fused(m) if op.attrs["name"] == "attention"]
    assert any(o.name == "isnan" for o in fused.regions[0].ops)
    np.testing.assert_allclose(interpret(m, inputs)[0], want, rtol=1e-6, atol=1e-6)
    assert not np.isnan(want).any() and (want[0, 1, 2] == 0).all()


def test_a_scaled_matmul_that_is_not_attention_is_left_alone():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (4, 4))])
    x = b.args[0]
    s = b.mul(b.matmul(x, x), b.broadcast_to(b.constant(np.array(3.0, np.float32), "c"), shape=(4, 4)))
    b.ret(b.relu(s))
    inputs = [np.random.default_rng(4).standard_normal((4, 4)).astype(np.float32)]
    want = interpret(m, inputs)[0]
    assert _fused(m) == []
    np.testing.assert_array_equal(interpret(m, inputs)[0], want)
