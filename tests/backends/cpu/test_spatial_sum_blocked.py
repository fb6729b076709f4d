"""The blocked sum over H and W (`spatial_sum_nchwc`, kernels/dwconv.c), compiled against the reference interpreter:
squeeze-excite's mean and a global pool read from a blocked conv's result (channels that are not whole blocks, maps
narrower than a run of four pixels or longer than a float run, batches, symbolic sizes, keepdims, NaN and inf), and
the op on its own on empty planes."""
import numpy as np
import pytest

import cuvil
from cuvil.compiler import compile_module
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType, sym
from cuvil.ops.nn_blocked import to_blocked
from cuvil.passes import layout
from cuvil.backends.cpu.kernels import conv_block

RNG = np.random.default_rng(5)


@pytest.fixture(autouse=True)
def free_conversions(monkeypatch):
    monkeypatch.setitem(layout.COST, "convert", 0.0)
    monkeypatch.setitem(layout.COST, "blocked", 1e18)  # every conv blocked: the sum is under test, not the cost rule


def _conv_mean(c_in, c_out, shape, keepdims=True):
    """conv -> relu, then the mean over H and W (squeeze-excite's) and the relu's result scaled by it."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", shape)], ["x"])
    w = b.constant((RNG.standard_normal((c_out, c_in, 3, 3)) / 3).astype(np.float32))
    y = b.relu(b.conv(b.args[0], w, b.constant(RNG.standard_normal(c_out).astype(np.float32)), pads=(1, 1, 1, 1)))
    mean = b.reduce_mean(y, axes=(2, 3), keepdims=keepdims)
    scale = mean if keepdims else b.reshape(mean, shape=(shape[0], c_out, 1, 1))
    b.ret(mean, b.mul(y, b.broadcast_to(scale, shape=y.type.shape)))
    return m


def _check(m, inputs):
    exe = compile_module(m)
    assert "= spatial_sum_nchwc" in cuvil.inspect_ir(exe)
    for got, want in zip(exe(*inputs), interpret(m, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(want).max(initial=0))))


@pytest.mark.parametrize("c_in, c_out, shape", [(3, 16, (1, 3, 7, 9)), (5, 20, (2, 5, 3, 2)), (4, 37, (3, 4, 3, 1)),
                                               (3, 32, (1, 3, 23, 23)), (8, 24, (1, 8, 40, 41))])
def test_mean_of_a_blocked_conv_matches_interpreter(c_in, c_out, shape):
    _check(_conv_mean(c_in, c_out, shape), [RNG.standard_normal(shape).astype(np.float32)])


def test_mean_without_keepdims():
    shape = (2, 3, 6, 5)
    _check(_conv_mean(3, 20, shape, keepdims=False), [RNG.standard_normal(shape).astype(np.float32)])


def test_symbolic_batch_and_image():
    m = _conv_mean(3, 20, (sym("n"), 3, sym("h"), sym("w")))
    for shape in [(1, 3, 5, 4), (3, 3, 17, 9), (0, 3, 4, 4), (1, 3, 1, 1)]:
        _check(m, [RNG.standard_normal(shape).astype(np.float32)])


def _spatial_sum():
    """The op itself on the host's blocks."""
    block = conv_block()
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (sym("n"), 2 * block, sym("h"), sym("w")))], ["x"])
    b.ret(b.spatial_sum_nchwc(to_blocked(b, b.args[0], block)))
    return m, compile_module(m), block


def test_the_op_on_empty_and_single_pixel_planes():
    """Sums of no pixels are zero, of one pixel the pixel; a plane longer than a float run."""
    m, exe, block = _spatial_sum()
    for shape in [(2, 2 * block, 0, 5), (1, 2 * block, 1, 1), (3, 2 * block, 4, 261)]:
        x = RNG.standard_normal(shape).astype(np.float32)
        got, want = exe(x)[0], interpret(m, [x])[0]
        assert got.shape == (shape[0], 2, 1, 1, block)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_nan_and_inf_reach_their_channel_only():
    m, exe, block = _spatial_sum()
    x = RNG.standard_normal((1, 2 * block, 9, 7)).astype(np.float32)
    x[0, 0, 4, 4], x[0, 3, 0, 6], x[0, 5, 8, 0], x[0, 5, 2, 2] = np.nan, np.inf, np.inf, -np.inf
    got = exe(x)[0].reshape(-1)
    assert np.isnan(got[[0, 5]]).all() and np.isposinf(got[3])
    np.testing.assert_allclose(got, interpret(m, [x])[0].reshape(-1), rtol=1e-5)
