"""A depthwise conv's clamps (relu, relu6 as clip or as relu -> min, bounds from a constant) fused into
`cuvil_dwconv2d`'s store, compiled against the reference interpreter; clamps that must stay separate (a bound
that is an input, a conv result read twice) give the same results unfused."""

import numpy as np
import pytest

from cuvil.compiler import compile_module
from cuvil.interpreter import interpret
from cuvil.ir.builder import Builder
from cuvil.ir.core import Module
from cuvil.ir.dtypes import DType
from cuvil.ir.types import TensorType

from .test_library_ops import rand


def clip_const(b, y, t):  # relu6 as ONNX Clip with constant inputs exports it
    six = b.broadcast_to(b.constant(np.array(6, np.float32), "six"), shape=y.type.shape)
    return b.min(b.relu(y), six)


# name: (epilogue (builder, conv result, an input of its shape) -> result, fused into the conv)
EPILOGUES = {
    "clip-0-6": (lambda b, y, t: b.clip(y, min=0.0, max=6.0), True),
    "relu": (lambda b, y, t: b.relu(y), True),
    "relu-min-constant": (clip_const, True),
    "max-zero-min-full": (lambda b, y, t: b.min(b.max(y, b.full(0.0, y.type.shape, DType.f32)),
                                                b.full(0.5, y.type.shape, DType.f32)), True),
    "bound-is-an-input": (lambda b, y, t: b.min(b.max(y, t), b.full(6.0, y.type.shape, DType.f32)), False),
    "conv-result-used-twice": (lambda b, y, t: b.add(b.clip(y, min=0.0, max=6.0), y), False),
}
GEOMETRY = {  # name: (x shape, kernel, attrs besides groups, output shape)
    "3x3-s1": ((1, 8, 14, 13), (3, 3), {"pads": (1, 1, 1, 1)}, (1, 8, 14, 13)),
    "3x3-s2": ((2, 6, 15, 16), (3, 3), {"strides": (2, 2), "pads": (1, 1, 1, 1)}, (2, 6, 8, 8)),
    "1-D": ((2, 4, 23), (5,), {"pads": (2, 2)}, (2, 4, 23)),
}


def conv_then(epilogue, x_shape, kernel, attrs, y_shape) -> Module:
    """@main(x, t) = epilogue(depthwise conv(x) with constant weights and bias, t); t has the conv's shape."""
    m, c = Module(), x_shape[1]
    b = Builder.new_function(m, "main", [TensorType(DType.f32, x_shape), TensorType(DType.f32, y_shape)])
    x, t = b.args
    w, bias = b.constant(rand(c, 1, *kernel, seed=1), "w"), b.constant(rand(c, seed=2), "bias")
    y = b.emit("conv", x, w, bias, groups=c, **attrs)
    b.ret(epilogue(b, y, t))
    return m


def clamp_in_the_conv(exe) -> bool:
    """Whether the clamp runs in the conv's store: `cuvil_dwconv2d` (a library group), or, where the channels are
    a multiple of the vector width (8 on AVX2), the blocked `dwconv_nchwc` with its activation attribute."""
    ops = list(exe.module.functions["main"].walk())
    return any(op.name == "fused" and op.attrs["kind"] == "library" for op in ops) or any(
        op.name == "dwconv_nchwc" and op.attrs["activation"] != "none" for op in ops)


@pytest.mark.parametrize("geometry", sorted(GEOMETRY))
@pytest.mark.parametrize("name", sorted(EPILOGUES))
def test_clamped_depthwise_matches_interpreter(name, geometry):
    epilogue, fuses = EPILOGUES[name]
    m = conv_then(epilogue, *GEOMETRY[geometry])
    x, t = rand(*GEOMETRY[geometry][0]) * 4, rand(*GEOMETRY[geometry][3], seed=3)
    x.flat[::37] = np.nan
    exe = compile_module(m)
    assert clamp_in_the_conv(exe) == fuses
    np.testing.assert_allclose(exe(x, t)[0], interpret(m, [x, t])[0], rtol=1e-5, atol=1e-5)


DENSE = {  # name: (x shape, weight shape, attrs, output shape): the 1x1 GEMM path and the im2col one
    "1x1": ((2, 6, 7, 9), (5, 6, 1, 1), {}, (2, 5, 7, 9)),
    "3x3-groups-2": ((1, 6, 9, 8), (4, 3, 3, 3), {"groups": 2, "pads": (1, 1, 1, 1)}, (1, 4, 9, 8)),
}
DENSE_EPILOGUES = {"relu": True, "clip-0-6": True, "relu-min-constant": True, "max-zero-min-full": False}


@pytest.mark.parametrize("geometry", sorted(DENSE))
@pytest.mark.parametrize("name", sorted(DENSE_EPILOGUES))
def test_relu_and_relu6_after_a_gemm_conv_become_its_epilogue(name, geometry):
    x_shape, w_shape, attrs, y_shape = DENSE[geometry]
    m = Module()
    b = Builder.new_function(m, "main", [TensorType(DType.f32, x_shape), TensorType(DType.f32, y_shape)])
    x, t = b.args
    w, bias = b.constant(rand(*w_shape, seed=1), "w"), b.constant(rand(w_shape[0], seed=2), "bias")
    b.ret(EPILOGUES[name][0](b, b.emit("conv", x, w, bias, **attrs), t))
    x, t = rand(*x_shape) * 4, rand(*y_shape, seed=3)
    x.flat[::41] = np.nan
    exe = compile_module(m)
    kinds = [op.attrs["kind"] for op in exe.module.functions["main"].walk() if op.name == "fused"]
    assert ("library" in kinds) == DENSE_EPILOGUES[name]
    np.testing.assert_allclose(exe(x, t)[0], interpret(m, [x, t])[0], rtol=1e-5, atol=1e-5)


ACTIVATIONS = {"sigmoid": {}, "tanh": {}, "gelu": {"approximate": "none"}, "gelu-tanh": {"approximate": "tanh"},
               "silu": {}, "hardswish": {}}


@pytest.mark.parametrize("geometry", sorted(DENSE))
@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_activations_after_a_gemm_conv_become_its_epilogue(name, geometry):
    """One kernel, not two: the activation is applied to the GEMM's output tile while it is in registers."""
    x_shape, w_shape, attrs, y_shape = DENSE[geometry]
    m = Module()
    b = Builder.new_function(m, "main", [TensorType(DType.f32, x_shape)])
    w, bias = b.constant(rand(*w_shape, seed=1), "w"), b.constant(rand(w_shape[0], seed=2), "bias")
    b.ret(b.emit(name.split("-")[0], b.emit("conv", b.args[0], w, bias, **attrs), **ACTIVATIONS[name]))
    x = rand(*x_shape) * 4
    x.flat[::41] = np.nan
    exe = compile_module(m)
    fused = [op for op in exe.module.functions["main"].walk() if op.name == "fused"]
    assert [op.attrs["kind"] for op in fused] == ["library"], exe.module
    np.testing.assert_allclose(exe(x)[0], interpret(m, [x])[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["silu", "hardswish"])
def test_silu_and_hardswish_after_a_matmul_become_its_epilogue(name):
    m = Module()
    b = Builder.new_function(m, "main", [TensorType(DType.f32, (13, 40))])
    b.ret(b.emit(name, b.matmul(b.args[0], b.constant(rand(40, 70, seed=1), "w"))))
    x = rand(13, 40) * 3
    exe = compile_module(m)
    assert [op.attrs["kind"] for op in exe.module.functions["main"].walk() if op.name == "fused"] == ["library"]
    np.testing.assert_allclose(exe(x)[0], interpret(m, [x])[0], rtol=1e-5, atol=1e-5)
