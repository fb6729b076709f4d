"""Winograd F(4x4, 3x3) (`conv_nchwc` with algorithm "winograd", kernels/winograd.c) against the reference
interpreter: edge tiles on every side, asymmetric pads, channel counts that are not whole blocks, residual and
relu epilogues, plain output, batches and symbolic sizes.

Tolerance: F(4x4, 3x3) in f32 loses about two decimal digits against the direct sum (its transforms multiply by
up to 8 on the way out and by 1/24 in the weights), so results are compared with atol = 1e-4 * max |y| (seen:
up to 8e-6 * max |y| at 512 channels).
"""
import ctypes

import numpy as np
import pytest

import cuvil
from cuvil.backends.cpu import backend, kernels
from cuvil.backends.cpu.backend import conv_block
from cuvil.compiler import compile_module
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType, sym
from cuvil.passes import layout
from cuvil.passes.layout import to_blocked

RNG = np.random.default_rng(1)
B = conv_block()


def _close(got, want):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(want).max(initial=0))))


def _weights(b, o, c):
    return b.constant((RNG.standard_normal((o, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32))


@pytest.mark.parametrize("c, o, pads, shape", [
    (16, 16, (1, 1, 1, 1), (1, 16, 13, 30)),
    (20, 33, (0, 2, 1, 0), (2, 20, 11, 17)),  # 20 -> 2 input blocks (zero-padded), 3 output blocks
    (48, 32, (0, 0, 0, 0), (1, 48, 21, 22)),  # no pad: edge tiles only on the far side
    (64, 64, (2, 2, 2, 2), (1, 64, 13, 13)),  # pads wider than the kernel's reach
])
def test_conv_chain_matches_interpreter(c, o, pads, shape, monkeypatch):
    monkeypatch.setitem(layout.COST, "convert", 0.0)
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", shape)], ["x"])
    y = b.conv(b.args[0], _weights(b, o, c), b.constant(RNG.standard_normal(o).astype(np.float32)), pads=pads)
    b.ret(b.relu(y), b.sigmoid(y))
    exe = compile_module(m)
    ir = cuvil.inspect_ir(exe)
    assert 'algorithm = "winograd"' in ir and "cuvil_conv_winograd" in exe._run.program.source
    x = RNG.standard_normal(shape).astype(np.float32)
    for got, want in zip(exe(x), interpret(m, [x])):
        _close(got, want)


def _blocked_module(shape, c, o, **attrs):
    """A conv_nchwc with algorithm "winograd" built directly (the pass would not pick it for symbolic sizes),
    its residual and relu epilogue, or its plain output."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", shape)], ["x"])
    xb = to_blocked(b, b.args[0], B)
    ob, cb = -(-o // B), -(-c // B)
    w = b.constant((RNG.standard_normal((ob, cb, 3, 3, B, B)) / np.sqrt(9 * c)).astype(np.float32))
    bias = b.constant(RNG.standard_normal((ob, B)).astype(np.float32))
    if attrs.pop("residual", False):
        res = b.conv_nchwc(xb, w, bias, pads=(1, 1, 1, 1))
        y = b.conv_nchwc(xb, w, bias, res, pads=(1, 1, 1, 1), activation="relu", algorithm="winograd")
    else:
        y = b.conv_nchwc(xb, w, bias, algorithm="winograd", **attrs)
    b.ret(y)
    return m


@pytest.mark.parametrize("attrs", [{"residual": True}, {"pads": (1, 0, 0, 2), "channels": 19}],
                         ids=["residual-relu", "plain-output"])
def test_symbolic_sizes(attrs):
    n, h, w = sym("n"), sym("h"), sym("w")
    m = _blocked_module((n, 24, h, w), 24, 24, **attrs)
    exe = compile_module(m)
    assert "cuvil_conv_winograd" in exe._run.program.source
    for shape in [(1, 24, 4, 4), (2, 24, 9, 14), (1, 24, 3, 25), (0, 24, 5, 5)]:
        x = RNG.standard_normal(shape).astype(np.float32)
        _close(exe(x)[0], interpret(m, [x])[0])


def test_winograd_needs_3x3_stride_1():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (1, B, 8, 8))], ["x"])
    xb = to_blocked(b, b.args[0], B)
    w = b.constant(np.zeros((1, 1, 3, 3, B, B), np.float32))
    with pytest.raises(Exception, match="winograd.*3x3 kernel, stride 1"):
        b.conv_nchwc(xb, w, b.constant(np.zeros((1, B), np.float32)), strides=(2, 2), algorithm="winograd")


def _weight_transform_reference(w, ob, cb):
    """U = G g G^T of kernels/winograd.c in NumPy: w [ob, cb, 3, 3, B(in), B(out)] -> u [36, ob, cb * B, B(out)]."""
    g = np.array([[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6], [1 / 24, 1 / 12, 1 / 6],
                  [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]])
    u = np.einsum("ik,ocklab,jl->ijocab", g, w.astype(np.float64), g)  # [6, 6, ob, cb, B, B]
    return u.reshape(36, ob, cb * B, B)


@pytest.mark.parametrize("offset", [0, 4])  # 64-byte aligned (streamed past the caches) and not (stored plainly)
def test_weight_transform_is_the_same_into_aligned_and_misaligned_memory(offset):
    lib = kernels.load(backend.opt_level())
    ob, cb = 3, 2
    w = kernels.aligned_array(RNG.standard_normal((ob, cb, 3, 3, B, B)).astype(np.float32))
    n = 4 * lib.cuvil_winograd_weight_size(ob, cb)  # bytes: the size is in floats
    raw = kernels.aligned_empty(n + 64, np.uint8)
    u = raw[offset:offset + n].view(np.float32)
    lib.cuvil_winograd_weight(w.ctypes.data_as(ctypes.c_void_p), ob, cb, u.ctypes.data_as(ctypes.c_void_p))
    np.testing.assert_allclose(u.reshape(36, ob, cb * B, B), _weight_transform_reference(w, ob, cb), rtol=1e-5,
                               atol=1e-6)
