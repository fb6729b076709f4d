"""The blocked depthwise kernel (`dwconv_nchwc`), compiled against the reference interpreter: depthwise convs that
the layout pass blocks (conversions made free) over strides, pads, dilations, kernel sizes, channel counts that are
not whole blocks, maps narrower than a strip, activation epilogues and symbolic sizes."""
import numpy as np
import pytest

import cuvil
from cuvil.compiler import compile_module
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType, sym
from cuvil.passes import layout

RNG = np.random.default_rng(1)
GEOMETRIES = [  # (channels, kernel, attrs, map)
    (16, (3, 3), {"pads": (1, 1, 1, 1)}, (13, 30)),
    (40, (3, 3), {"pads": (1, 1, 1, 1), "strides": (2, 2)}, (13, 30)),
    (9, (3, 3), {"pads": (1, 1, 1, 1), "strides": (2, 2)}, (7, 7)),
    (24, (5, 5), {"pads": (2, 2, 2, 2)}, (7, 9)),
    (17, (5, 5), {"pads": (2, 2, 2, 2), "strides": (2, 2)}, (14, 11)),
    (16, (3, 3), {"pads": (0, 2, 1, 0), "dilations": (2, 3)}, (9, 10)),
    (33, (3, 2), {"strides": (1, 3)}, (5, 26)),
    (16, (3, 3), {"pads": (1, 1, 1, 1)}, (1, 1)),
    (24, (3, 3), {"pads": (1, 1, 1, 1), "strides": (2, 2)}, (2, 3)),
]


@pytest.fixture(autouse=True)
def free_conversions(monkeypatch):
    monkeypatch.setitem(layout.COST, "convert", 0.0)
    monkeypatch.setitem(layout.COST, "blocked-depthwise", 1e18)  # the kernel is under test here, not the cost rule


def _depthwise(c, kernel, attrs, shape, act=None, act_attrs=None):
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", shape)], ["x"])
    w = b.constant(RNG.standard_normal((c, 1, *kernel)).astype(np.float32))
    y = b.conv(b.args[0], w, b.constant(RNG.standard_normal(c).astype(np.float32)), groups=c, **attrs)
    b.ret(b.emit(act, y, **(act_attrs or {})) if act else y)
    return m


def _check(m, inputs, activation="none"):
    exe = compile_module(m)
    ir = cuvil.inspect_ir(exe)
    assert "= dwconv_nchwc" in ir and f'activation = "{activation}"' in ir
    for got, want in zip(exe(*inputs), interpret(m, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max(initial=0))))


@pytest.mark.parametrize("c, kernel, attrs, size", GEOMETRIES, ids=[f"{g[0]}-{g[1]}-{i}"
                                                                     for i, g in enumerate(GEOMETRIES)])
def test_depthwise_matches_interpreter(c, kernel, attrs, size):
    shape = (2, c, *size)
    _check(_depthwise(c, kernel, attrs, shape), [RNG.standard_normal(shape).astype(np.float32)])


@pytest.mark.parametrize("act, attrs, name", [("relu", {}, "relu"), ("clip", {"min": 0.0, "max": 6.0}, "relu6"),
                                              ("sigmoid", {}, "sigmoid"), ("silu", {}, "silu"),
                                              ("hardswish", {}, "hardswish")])
def test_activation_epilogues(act, attrs, name):
    """The activation after a depthwise conv runs in its epilogue, values spread over its interesting range."""
    shape = (1, 24, 11, 12)
    m = _depthwise(24, (3, 3), {"pads": (1, 1, 1, 1)}, shape, act, attrs)
    _check(m, [RNG.standard_normal(shape).astype(np.float32) * 3], name)


def test_symbolic_batch_and_image():
    m = _depthwise(20, (3, 3), {"pads": (1, 1, 1, 1), "strides": (2, 2)}, (sym("n"), 20, sym("h"), sym("w")))
    for shape in [(1, 20, 5, 4), (3, 20, 9, 17), (0, 20, 4, 4), (1, 20, 1, 1)]:
        _check(m, [RNG.standard_normal(shape).astype(np.float32)])
