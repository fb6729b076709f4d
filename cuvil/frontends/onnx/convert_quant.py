"""Quantization: QuantizeLinear, DequantizeLinear (per tensor, per axis, blocked; integer, 4/2-bit and
8/4-bit float types through carriers), and the integer ops MatMulInteger, ConvInteger, QLinearMatMul,
QLinearConv, spelled as exact integer (or float64) arithmetic then rounding; QLinearMatMul and QLinearConv of
uint8 activations and symmetric int8 constant weights run on the int8 kernels instead (convert_quant_fused.py)."""
from __future__ import annotations

import numpy as np
from onnx import TensorProto as T

from ...ir.dtypes import DType
from .carriers import CARRIERS, quantize
from .convert_nn import conv_attrs
from .convert_quant_fused import qlinear_conv_kernel, qlinear_matmul_kernel
from .registry import converter
from .tensors import Tensor, ir_dtype

_NARROW_RANGE = {T.UINT16: (0, 2 ** 16 - 1), T.UINT32: (0, 2 ** 32 - 1), T.INT4: (-8, 7), T.UINT4: (0, 15),
                 T.INT2: (-2, 1), T.UINT2: (0, 3)}


def int_range(elem: int) -> tuple:
    if elem in _NARROW_RANGE:
        return _NARROW_RANGE[elem]
    info = np.iinfo(ir_dtype(elem).numpy)
    return int(info.min), int(info.max)


def per_axis(ctx, param, x, axis: int, block: int = 0):
    """A scale or zero point shaped to broadcast against x: a scalar, one value per index of `axis`, or
    (blocked) one value per `block` consecutive indices of `axis`."""
    rank, shape = x.type.rank, x.type.shape
    axis = axis + rank if axis < 0 else axis
    if param.type.rank == 0 or param.type.numel == 1:
        return ctx.expand(ctx.b.reshape(param, shape=()), shape)
    if block:
        spread = ctx.b.reshape(param, shape=param.type.shape[:axis + 1] + (1,) + param.type.shape[axis + 1:])
        wide = param.type.shape[:axis + 1] + (block,) + param.type.shape[axis + 1:]
        return ctx.b.reshape(ctx.expand(spread, wide), shape=shape)
    return ctx.expand(ctx.b.reshape(param, shape=[d if i == axis else 1 for i, d in enumerate(shape)]), shape)


def _target(ctx) -> int:
    out = ctx.attr("output_dtype", 0)
    if out:
        return out
    return ctx.tensor(2).elem if ctx.has(2) else T.UINT8


def requantize(ctx, y, zero_point, elem: int, saturate: bool = True):
    """round(y) + zero point, clipped to the integer type (or rounded to a float8/4 grid)."""
    if elem in CARRIERS and CARRIERS[elem].float_format:
        if zero_point is not None:
            y = ctx.b.add(y, ctx.cast(zero_point, y.type.dtype))
        return Tensor(value=quantize(ctx, y, elem, saturate), elem=elem)
    y = ctx.cast(y, DType.f64)
    y = ctx.b.round(y)
    if zero_point is not None:
        y = ctx.b.add(y, ctx.cast(zero_point, DType.f64))
    lo, hi = int_range(elem)
    y = ctx.b.clip(y, min=float(lo), max=float(hi))
    return Tensor(value=ctx.cast(y, ir_dtype(elem)), elem=elem)


@converter("QuantizeLinear")
def quantize_linear(ctx):
    x, axis, block = ctx.x(0), ctx.attr("axis", 1), ctx.attr("block_size", 0)
    scale = ctx.cast(per_axis(ctx, ctx.x(1), x, axis, block), x.type.dtype)
    zp = per_axis(ctx, ctx.x(2), x, axis, block) if ctx.has(2) else None
    return [requantize(ctx, ctx.b.div(x, scale), zp, _target(ctx), bool(ctx.attr("saturate", 1)))]


@converter("DequantizeLinear")
def dequantize_linear(ctx):
    x, axis, block = ctx.x(0), ctx.attr("axis", 1), ctx.attr("block_size", 0)
    scale = per_axis(ctx, ctx.x(1), x, axis, block)
    out = ir_dtype(ctx.attr("output_dtype", 0)) if ctx.attr("output_dtype", 0) else scale.type.dtype
    v = ctx.cast(x, DType.f64)
    if ctx.has(2):
        v = ctx.b.sub(v, ctx.cast(per_axis(ctx, ctx.x(2), x, axis, block), DType.f64))
    return [ctx.cast(ctx.b.mul(v, ctx.cast(scale, DType.f64)), out)]


# -- integer arithmetic -----------------------------------------------------------------------------------
def _centered(ctx, i: int, zp_index: int, zp_axis: int = 0):
    """Input i minus its zero point (a scalar, or one per index of `zp_axis`), as i32: exact for 8-bit data."""
    v = ctx.cast(ctx.x(i), DType.i32)
    if not ctx.has(zp_index):
        return v
    return ctx.b.sub(v, per_axis(ctx, ctx.cast(ctx.x(zp_index), DType.i32), v, zp_axis))


def _int_conv(ctx, x, w):
    """An integer convolution, exact in float64 (the IR's conv is a float op)."""
    return ctx.b.conv(ctx.cast(x, DType.f64), ctx.cast(w, DType.f64), **conv_attrs(ctx, x, w))


def _scale_factor(ctx, a, b, y):
    """a_scale * b_scale / y_scale, computed in the scales' type as ONNX does, as float64."""
    a, b, y = ctx.broadcast(a, b, y)
    return ctx.cast(ctx.b.div(ctx.b.mul(a, b), y), DType.f64)


@converter("MatMulInteger")
def matmul_integer(ctx):
    return [ctx.b.matmul(_centered(ctx, 0, 2, -2), _centered(ctx, 1, 3, -1))]


@converter("ConvInteger")
def conv_integer(ctx):
    return [ctx.cast(_int_conv(ctx, _centered(ctx, 0, 2), _centered(ctx, 1, 3, 0)), DType.i32)]


@converter("QLinearMatMul")
def qlinear_matmul(ctx):
    fast = qlinear_matmul_kernel(ctx)
    if fast is not None:
        return [fast]
    c = ctx.cast(ctx.b.matmul(_centered(ctx, 0, 2, -2), _centered(ctx, 3, 5, -1)), DType.f64)
    factor = per_axis(ctx, _scale_factor(ctx, ctx.x(1), ctx.x(4), ctx.x(6)), c, -1)
    y = ctx.b.mul(c, factor)
    return [requantize(ctx, y, per_axis(ctx, ctx.x(7), y, -1), ctx.tensor(7).elem)]


@converter("QLinearConv")
def qlinear_conv(ctx):
    fast = qlinear_conv_kernel(ctx)
    if fast is not None:
        return [fast]
    acc = _int_conv(ctx, _centered(ctx, 0, 2), _centered(ctx, 3, 5, 0))
    if ctx.has(8):
        acc = ctx.b.add(acc, per_axis(ctx, ctx.cast(ctx.x(8), DType.f64), acc, 1))
    factor = per_axis(ctx, _scale_factor(ctx, ctx.x(1), ctx.x(4), ctx.x(6)), acc, 1)
    y = ctx.b.mul(acc, factor)
    return [requantize(ctx, y, per_axis(ctx, ctx.x(7), y, 1), ctx.tensor(7).elem)]
