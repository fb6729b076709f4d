"""The blocked convolution kernel (`conv_nchwc`), compiled against the reference interpreter: convs that the
layout pass blocks (every conv here: conversions are made free and blocked convs win whatever their padding)
over strides, pads, dilations, kernel sizes, channel counts that are not whole blocks and symbolic sizes."""
import re

import numpy as np
import pytest

import cuvil
from cuvil.compiler import compile_module
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType, sym
from cuvil.passes import layout

RNG = np.random.default_rng(0)
GEOMETRIES = [  # (C, O, kernel, attrs)
    (16, 16, (3, 3), {"pads": (1, 1, 1, 1)}),
    (5, 20, (3, 3), {"pads": (1, 1, 1, 1), "strides": (2, 2)}),
    (20, 33, (1, 1), {}),
    (24, 8, (1, 1), {"strides": (2, 2)}),
    (3, 17, (7, 7), {"pads": (3, 3, 3, 3), "strides": (2, 2)}),
    (7, 9, (3, 2), {"pads": (2, 0, 1, 3), "dilations": (2, 3)}),
    (16, 32, (5, 5), {"pads": (0, 2, 4, 1), "strides": (1, 3)}),
]


@pytest.fixture(autouse=True)
def free_conversions(monkeypatch):
    monkeypatch.setitem(layout.COST, "convert", 0.0)
    monkeypatch.setitem(layout.COST, "blocked", 1e18)  # the kernel is under test here, not the cost rule


def _conv_relu(c, o, kernel, attrs, shape):
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", shape)], ["x"])
    w = b.constant(RNG.standard_normal((o, c, *kernel)).astype(np.float32))
    y = b.conv(b.args[0], w, b.constant(RNG.standard_normal(o).astype(np.float32)), **attrs)
    b.ret(b.relu(y), b.sigmoid(y))
    return m


def _check(m, inputs):
    exe = compile_module(m)
    assert "conv_nchwc" in cuvil.inspect_ir(exe)
    for got, want in zip(exe(*inputs), interpret(m, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max(initial=0))))


@pytest.mark.parametrize("c, o, kernel, attrs", GEOMETRIES, ids=[f"{g[0]}-{g[1]}-{g[2]}-{i}"
                                                                  for i, g in enumerate(GEOMETRIES)])
def test_conv_matches_interpreter(c, o, kernel, attrs):
    shape = (2, c, 13, 30)  # 30 columns: strips of every width and edge columns on both sides
    _check(_conv_relu(c, o, kernel, attrs, shape), [RNG.standard_normal(shape).astype(np.float32)])


@pytest.mark.parametrize("c, o, kernel, attrs", GEOMETRIES, ids=[f"{g[0]}-{g[1]}-{g[2]}-{i}"
                                                                  for i, g in enumerate(GEOMETRIES)])
@pytest.mark.parametrize("batch", [13, 9])
def test_narrow_maps_strip_across_images(c, o, kernel, attrs, batch):
    """Output maps narrower than a strip, several images: strips run across the images at one output pixel
    (13 = a strip of 12 and one of 1; 9 = 7 and an overlapping 4)."""
    shape = (batch, c, 7, 6)
    _check(_conv_relu(c, o, kernel, attrs, shape), [RNG.standard_normal(shape).astype(np.float32)])


@pytest.mark.parametrize("act, attrs", [("relu", {}), ("clip", {"min": 0.0, "max": 6.0}), ("sigmoid", {}),
                                        ("tanh", {}), ("silu", {}), ("hardswish", {})])
# 9: Winograd; 3: direct, strips across the images; 13 with 1x1 kernels: direct, rows of strips (12 and 4)
@pytest.mark.parametrize("size, k", [(9, 3), (3, 3), (13, 1)])
def test_activation_epilogues(act, attrs, size, k):
    """conv -> + residual -> activation in the kernel's epilogue, direct and Winograd, blocked and plain output
    (the second conv's result leaves the chain), values spread over every activation's interesting range."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (3, 16, size, size))], ["x"])

    def conv(v):
        w = b.constant(RNG.standard_normal((16, 16, k, k)).astype(np.float32) * 0.4)
        return b.conv(v, w, b.constant(RNG.standard_normal(16).astype(np.float32)), pads=(k // 2,) * 4)
    x = b.args[0]
    y = b.emit(act, b.add(conv(x), x), **attrs)
    b.ret(b.emit(act, conv(y), **attrs))
    exe = compile_module(m)
    ir = cuvil.inspect_ir(exe)
    assert ir.count("= conv_nchwc") == 2 and f"= {act} " not in ir and ('"winograd"' in ir) == (size == 9)
    _check(m, [RNG.standard_normal((3, 16, size, size)).astype(np.float32) * 3])


def test_symbolic_batch_and_image():
    m = _conv_relu(6, 19, (3, 3), {"pads": (1, 1, 1, 1), "strides": (2, 1)}, (sym("n"), 6, sym("h"), sym("w")))
    for shape in [(1, 6, 5, 4), (3, 6, 9, 17), (0, 6, 4, 4), (1, 6, 1, 1)]:
        _check(m, [RNG.standard_normal(shape).astype(np.float32)])


def test_residual_block_with_chain():
    """conv -> relu -> conv -> + x -> relu, the second stage's residual from a downsampling conv."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (2, 16, 10, 10))], ["x"])

    def conv(v, o, k, **attrs):
        w = b.constant(RNG.standard_normal((o, v.type.shape[1], k, k)).astype(np.float32) * 0.2)
        return b.conv(v, w, b.constant(RNG.standard_normal(o).astype(np.float32)), **attrs)
    x = b.args[0]
    y = b.relu(b.add(conv(b.relu(conv(x, 16, 3, pads=(1,) * 4)), 16, 3, pads=(1,) * 4), x))
    z = b.relu(b.add(conv(y, 24, 3, pads=(1,) * 4, strides=(2, 2)), conv(y, 24, 1, strides=(2, 2))))
    b.ret(b.reduce_mean(z, axes=(2, 3)))
    _check(m, [RNG.standard_normal((2, 16, 10, 10)).astype(np.float32)])


@pytest.mark.parametrize("pool", [{"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)},
                                  {"kernel": (2, 3), "strides": (2, 1), "pads": (0, 1, 1, 0), "ceil_mode": True},
                                  {"kernel": (3, 2), "strides": (1, 2), "dilations": (2, 1)}])
def test_blocked_max_pool(pool):
    """conv -> max_pool -> conv, the pool on the blocked tensor (vectorised over the block's channels)."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (2, 5, 15, 13))], ["x"])

    def conv(v, o):
        w = b.constant(RNG.standard_normal((o, v.type.shape[1], 3, 3)).astype(np.float32) * 0.3)
        return b.conv(v, w, b.constant(RNG.standard_normal(o).astype(np.float32)), pads=(1, 1, 1, 1))
    b.ret(conv(b.max_pool(b.relu(conv(b.args[0], 20)), **pool), 9))
    x = RNG.standard_normal((2, 5, 15, 13)).astype(np.float32)
    exe = compile_module(m)
    assert "max_pool" in cuvil.inspect_ir(exe) and ", 1]" in cuvil.inspect_ir(exe).split("max_pool")[1].split("\n")[0]
    _check(m, [x])


def test_small_unet_with_blocked_skip_concats():
    """A UNet's levels on an odd map (14 x 10, batch 2): max pool down; up by a 2x2 stride-2 conv_transpose and by
    nearest 2x upsampling, each concatenated with its skip (whole blocks: the concat stays blocked); silu written as
    x * sigmoid(x); a sigmoid head of 3 channels."""
    m, rng = Module(), np.random.default_rng(20)
    b = Builder.new_function(m, "main", [TensorType("f32", (2, 3, 14, 10))], ["x"])

    def conv(v, o, k=3):  # weights at 1 / sqrt(fan-in): values stay near 1 through the six layers
        w = rng.standard_normal((o, v.type.shape[1], k, k)) / np.sqrt(v.type.shape[1] * k * k)
        y = b.conv(v, b.constant(w.astype(np.float32)), b.constant(rng.standard_normal(o).astype(np.float32)),
                   pads=(k // 2,) * 4)
        return b.mul(y, b.sigmoid(y))
    skip = conv(conv(b.args[0], 16), 16)
    low = conv(b.max_pool(skip, kernel=(2, 2), strides=(2, 2)), 32)
    w_up = b.constant(rng.standard_normal((32, 16, 2, 2)).astype(np.float32) * 0.2)
    up = b.conv_transpose(low, w_up, b.constant(rng.standard_normal(16).astype(np.float32)), strides=(2, 2))
    near = conv(b.resize(low, sizes=(2, 32, 14, 10), mode="nearest", coordinate_transformation_mode="asymmetric",
                         nearest_mode="floor"), 16)
    merged = conv(b.concat(conv(b.concat(up, skip, axis=1), 16), near, axis=1), 16)
    w_head = b.constant(rng.standard_normal((3, 16, 1, 1)).astype(np.float32) * 0.25)
    b.ret(b.sigmoid(b.conv(merged, w_head, b.constant(rng.standard_normal(3).astype(np.float32)))))
    exe = compile_module(m)
    ir = cuvil.inspect_ir(exe)
    assert "resize" not in ir and "conv_transpose" not in ir and ir.count('activation = "silu"') == 6, ir
    assert len(re.findall(r"f32\[2,\d+,14,10,\d+\] = concat", ir)) == 2, ir  # both concats on blocked tensors
    _check(m, [rng.standard_normal((2, 3, 14, 10)).astype(np.float32)])
