"""Small programs shared by the IR tests."""
import numpy as np

from cuvil.ir import Builder, Location, Module, TensorType, sym


def control_flow_program(weight_seed: int = 0) -> Module:
    """relu(x @ w) if mean > 0 else its negation, then squared in a loop three times; symbolic batch."""
    m = Module()
    n = sym("n")
    b = Builder.new_function(m, "main", [TensorType("f32", (n, 4))], ["x"])
    (x,) = b.args
    w = b.constant(np.random.default_rng(weight_seed).standard_normal((4, 4)).astype(np.float32), "w")
    y = b.relu(b.mul(x, x), loc=Location("model.py", 7, 4))
    p = b.lt(b.full(1.0, ()), b.full(2.0, ()), loc=Location(node="onnx:Less_3"))
    (z,) = b.cond(p, lambda t: t.neg(y), lambda e: e.abs(y))
    i0 = b.full(0, (), "i64")
    _, acc = b.while_loop([i0, z], lambda c, i, a: c.lt(i, c.full(3, (), "i64")),
                          lambda c, i, a: (c.add(i, c.full(1, (), "i64")), c.mul(a, c.full(0.5, (n, 4)))))
    b.ret(acc, w)
    return m
