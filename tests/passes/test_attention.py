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
