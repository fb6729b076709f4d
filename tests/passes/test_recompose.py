"""Decomposed gelu / softmax / layer_norm, written as exporters write them, become the composite op."""
import math

import numpy as np
import pytest

from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType, sym
from cuvil.passes import DCE, PassManager, Pipeline, Recompose, Simplify

SHAPE = (sym("n"), 6)


def scalar(b, v, like):
    return b.broadcast_to(b.full(v, ()), shape=like.type.shape)


def gelu_forms():
    def a(b, x):  # x * 0.5 * (1 + erf(x / sqrt2))
        e = b.erf(b.div(x, scalar(b, math.sqrt(2), x)))
        return b.mul(b.mul(x, scalar(b, 0.5, x)), b.add(e, scalar(b, 1.0, x)))

    def c(b, x):  # (x * (erf(x * 1/sqrt2) + 1)) * 0.5
        e = b.erf(b.mul(x, scalar(b, 1 / math.sqrt(2), x)))
        return b.mul(b.mul(x, b.add(scalar(b, 1.0, x), e)), scalar(b, 0.5, x))
    return [a, c]


def gelu_tanh_forms():
    def newgelu(b, x):  # GPT-2: 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * pow(x, 3))))
        inner = b.add(x, b.mul(scalar(b, 0.044715, x), b.pow(x, scalar(b, 3.0, x))))
        t = b.tanh(b.mul(scalar(b, math.sqrt(2 / math.pi), x), inner))
        return b.mul(b.mul(scalar(b, 0.5, x), x), b.add(scalar(b, 1.0, x), t))

    def grouped(b, x):  # x * (0.5 * (tanh(...) + 1)), the cube written out
        inner = b.add(b.mul(b.mul(b.mul(x, x), x), scalar(b, 0.044715, x)), x)
        t = b.tanh(b.mul(inner, scalar(b, math.sqrt(2 / math.pi), x)))
        return b.mul(x, b.mul(b.add(t, scalar(b, 1.0, x)), scalar(b, 0.5, x)))
    return [newgelu, grouped]


def silu_forms():
    return [lambda b, x: b.mul(x, b.sigmoid(x)), lambda b, x: b.mul(b.sigmoid(x), x)]


def softmax_form(b, x):
    e = b.exp(b.sub(x, b.broadcast_to(b.reduce_max(x, axes=(1,)), shape=SHAPE)))
    return b.div(e, b.broadcast_to(b.reduce_sum(e, axes=(1,)), shape=SHAPE))


def layer_norm_form(b, x):
    d = b.sub(x, b.broadcast_to(b.reduce_mean(x, axes=(1,)), shape=SHAPE))
    var = b.reduce_mean(b.pow(d, scalar(b, 2.0, d)), axes=(1,))
    std = b.sqrt(b.add(var, b.broadcast_to(b.full(1e-5, ()), shape=var.type.shape)))
    scale = b.constant(np.linspace(0.5, 2, 6, dtype=np.float32), "scale")
    bias = b.constant(np.linspace(-1, 1, 6, dtype=np.float32), "bias")
    y = b.mul(b.div(d, b.broadcast_to(std, shape=SHAPE)), b.broadcast_to(scale, shape=SHAPE))
    return b.add(y, b.broadcast_to(bias, shape=SHAPE))


@pytest.mark.parametrize("form, op", [(f, "gelu") for f in gelu_forms() + gelu_tanh_forms()] +
                         [(f, "silu") for f in silu_forms()] +
                         [(softmax_form, "softmax"),
                                                                             (layer_norm_form, "layer_norm")])
def test_recomposed(form, op):
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", SHAPE)], ["x"])
    b.ret(form(b, b.args[0]))
    x = np.random.default_rng(0).standard_normal((3, 6)).astype(np.float32)
    want = interpret(m, [x])
    PassManager().run(Pipeline("p", [Simplify(), Recompose(), DCE()]), m)
    names = [o.name for o in m.main.walk()]
    assert op in names and not {"exp", "erf", "tanh", "reduce_mean", "sigmoid"} & set(names)
    np.testing.assert_allclose(interpret(m, [x])[0], want[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("form", gelu_tanh_forms())
def test_tanh_form_becomes_the_tanh_gelu(form):
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", SHAPE)], ["x"])
    b.ret(form(b, b.args[0]))
    PassManager().run(Pipeline("p", [Simplify(), Recompose(), DCE()]), m)
    assert [o.attrs["approximate"] for o in m.main.walk() if o.name == "gelu"] == ["tanh"]


def test_tanh_form_with_another_coefficient_is_left_alone():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", SHAPE)], ["x"])
    x = b.args[0]
    inner = b.add(x, b.mul(scalar(b, 0.05, x), b.mul(b.mul(x, x), x)))
    t = b.tanh(b.mul(scalar(b, math.sqrt(2 / math.pi), x), inner))
    b.ret(b.mul(b.mul(scalar(b, 0.5, x), x), b.add(scalar(b, 1.0, x), t)))
    PassManager().run(Pipeline("p", [Simplify(), Recompose(), DCE()]), m)
    assert "gelu" not in [o.name for o in m.main.walk()]


def test_softmax_over_another_axis_is_left_alone():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (4, 6))], ["x"])
    x = b.args[0]
    e = b.exp(b.sub(x, b.broadcast_to(b.reduce_max(x, axes=(0,)), shape=(4, 6))))
    b.ret(b.div(e, b.broadcast_to(b.reduce_sum(e, axes=(0,)), shape=(4, 6))))
    assert not Recompose().run_on_operation(m.main)


def test_sigmoid_times_another_value_is_left_alone():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (4, 6)), TensorType("f32", (4, 6))], ["x", "y"])
    b.ret(b.mul(b.args[1], b.sigmoid(b.args[0])))
    assert not Recompose().run_on_operation(m.main)
