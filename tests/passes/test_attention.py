"""FuseAttention outlines softmax(Q K^T / c) V into one fused library op, and leaves other patterns alone."""
import numpy as np

from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType
from cuvil.passes import FuseAttention, run_pipeline
from cuvil.passes.manager import PipelineBuilder


def _attention(masked: bool = False) -> Module:
    m = Module()
    t = TensorType("f32", (2, 4, 8, 16))
    b = Builder.new_function(m, "main", [t, t, t, TensorType("f32", (2, 4, 8, 8))])
    q, k, v, mask = b.args
    s = b.matmul(q, b.transpose(k, perm=(0, 1, 3, 2)))
    s = b.div(s, b.broadcast_to(b.emit("full", value=4.0, shape=(), dtype="f32"), shape=(2, 4, 8, 8)))
    if masked:
        s = b.add(s, mask)
    b.ret(b.matmul(b.softmax(s, axis=3), v))
    return m


def _fused(m: Module) -> list:
    pb = PipelineBuilder("attention")
    pb.add(FuseAttention())
    run_pipeline(m, pb.build())
    return [op for op in m.main.body.ops if op.name == "fused"]


def test_attention_becomes_one_library_op_with_the_same_result():
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((2, 4, 8, 16)).astype(np.float32) for _ in range(3)]
    inputs.append(np.zeros((2, 4, 8, 8), np.float32))
    m = _attention()
    want = interpret(m, inputs)[0]
    (fused,) = _fused(m)
    assert (fused.attrs["kind"], fused.attrs["name"]) == ("library", "attention")
    assert [o.name for o in m.main.body.ops] == ["fused", "return"]
    np.testing.assert_allclose(interpret(m, inputs)[0], want, rtol=1e-6, atol=1e-6)


def test_a_mask_before_the_softmax_is_left_unfused():
    m = _attention(masked=True)
    assert _fused(m) == []
