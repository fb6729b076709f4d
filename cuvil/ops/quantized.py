"""Quantized ops: int8 linear and convolution (uint8 activations, per-channel int8 weights, int32 accumulation,
a fused dequantise/requantise + bias + activation epilogue) and int4 weight-only linear.

Activations are uint8 with a scale and zero point: `x_scale > 0` gives them for the whole tensor (static,
calibrated); `x_scale == 0` quantises each row (linear) or each image (conv) over its own range, holding 0, when
the op runs (dynamic). An f32 operand is quantised by the op; a u8 operand is already quantised with `x_scale` and
`x_zero`. `out_scale > 0` makes the result uint8 (round(y / out_scale) + out_zero), so int8 tensors flow between
layers; else it is f32. The references below compute exactly what the CPU kernels do (gemm_int8.c, gemm_int4.c).
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.dtypes import DType
from ..ir.types import TensorType
from .nn import _normalize_window, _pad, _spatial_out, windows
from .registry import Attr, register_op

ACTIVATIONS = ("none", "relu", "gelu_tanh", "gelu_erf", "sigmoid", "tanh", "relu6")  # the kernels' epilogue codes
_EPILOGUE = {"x_scale": Attr("float", 0.0), "x_zero": Attr("int", 0), "act": Attr("str", "none", ACTIVATIONS),
             "out_scale": Attr("float", 0.0), "out_zero": Attr("int", 0)}
INT4_GROUPS = (32, 64, 128)


# -- shared checks and arithmetic --------------------------------------------------------------------------
def _check(ctx, name, types, w_dtype, x_rank=None):
    x, w, scale = types[:3]
    if x.dtype not in (DType.f32, DType.u8):
        raise ctx.error(f"'{name}' takes x of f32 or u8 (already quantized), got {x}")
    if w.dtype is not w_dtype:
        raise ctx.error(f"'{name}' takes a weight of {w_dtype}, got {w}")
    if scale.dtype is not DType.f32 or (len(types) > 3 and (types[3].dtype is not DType.f32 or types[3].rank != 1)):
        raise ctx.error(f"'{name}' takes f32 scales and an f32 [N] bias, got {', '.join(map(str, types[2:]))}")
    if x_rank is not None and x.rank != x_rank:
        raise ctx.error(f"'{name}' takes x of rank {x_rank}, got {x}")


def _check_epilogue(ctx, name, attrs):
    if attrs["x_scale"] < 0 or attrs["out_scale"] < 0 or not (0 <= attrs["x_zero"] <= 255 and
                                                              0 <= attrs["out_zero"] <= 255):
        raise ctx.error(f"'{name}' scales must be >= 0 and zero points in 0..255, got {attrs}")


def _out_dtype(attrs) -> DType:
    return DType.u8 if attrs["out_scale"] > 0 else DType.f32


def quantize_u8(x: np.ndarray, scale, zero) -> np.ndarray:
    """x (f32) to uint8 with a scale and zero point (scalars, or arrays that broadcast), as the kernels round."""
    inv = np.float32(1) / np.asarray(scale, np.float32)
    v = np.rint(x.astype(np.float32) * inv) + np.asarray(zero, np.float32)
    return np.clip(v, 0, 255).astype(np.uint8)


def dynamic_range(x: np.ndarray, axis) -> tuple:
    """(scale, zero point) mapping x's range along `axis`, widened to hold 0, onto 0..255 (keepdims)."""
    lo = np.minimum(x.min(axis=axis, keepdims=True, initial=0.0), 0).astype(np.float32)
    hi = np.maximum(x.max(axis=axis, keepdims=True, initial=0.0), 0).astype(np.float32)
    scale = np.where(hi > lo, (hi - lo) / np.float32(255), np.float32(1)).astype(np.float32)
    zero = np.clip(np.rint(-lo / scale), 0, 255).astype(np.int64)
    return scale, zero


def activate(y: np.ndarray, act: str) -> np.ndarray:
    if act == "relu":
        return np.maximum(y, 0)
    if act == "relu6":
        return np.clip(y, 0, 6)
    if act == "gelu_tanh":
        return 0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y ** 3)))
    if act == "gelu_erf":
        return 0.5 * y * (1 + np.frompyfunc(math.erf, 1, 1)(y / np.sqrt(2)).astype(y.dtype))
    if act == "sigmoid":
        return 1 / (1 + np.exp(-y))
    return np.tanh(y) if act == "tanh" else y


def _epilogue(acc, za, sa, w_scale, bias, attrs, col_axis=-1, residual=None):
    """act((acc - za * colsum) * sa * w_scale + bias + residual), then f32 or requantised u8 (acc already has za
    removed)."""
    shape = [1] * acc.ndim
    shape[col_axis] = -1
    y = acc.astype(np.float32) * (np.float32(sa) * w_scale.reshape(shape)).astype(np.float32)
    if bias is not None:
        y = y + bias.reshape(shape)
    if residual is not None:
        y = y + dequantized_residual(residual, attrs)
    y = activate(y.astype(np.float32), attrs["act"]).astype(np.float32)
    if attrs["out_scale"] > 0:
        v = np.rint(y / np.float32(attrs["out_scale"])) + attrs["out_zero"]
        return np.clip(v, 0, 255).astype(np.uint8)
    return y


def _activations(x, attrs, axis):
    """(uint8 x, scale, zero point) of an operand, per the static/dynamic rule of the module docstring."""
    if x.dtype == np.uint8:
        return x, np.float32(attrs["x_scale"]), attrs["x_zero"]
    if attrs["x_scale"] > 0:
        return quantize_u8(x, attrs["x_scale"], attrs["x_zero"]), np.float32(attrs["x_scale"]), attrs["x_zero"]
    scale, zero = dynamic_range(x, axis)
    return quantize_u8(x, scale, zero), scale, zero


# -- qlinear_i8 --------------------------------------------------------------------------------------------
def _qlinear_shape(ctx, types, attrs):
    _check(ctx, "qlinear_i8", types, DType.i8)
    _check_epilogue(ctx, "qlinear_i8", attrs)
    x, w = types[:2]
    if x.rank < 1 or w.rank != 2 or types[2].shape != (w.shape[0],):
        raise ctx.error(f"'qlinear_i8' takes x [..., K], w [N, K] and w_scale [N], got {', '.join(map(str, types))}")
    ctx.require_equal(x.shape[-1], w.shape[1], f"'qlinear_i8' contraction size of {x} and {w}")
    return [TensorType(_out_dtype(attrs), (*x.shape[:-1], w.shape[0]))]


def _ref_qlinear(xs, attrs):
    x, w, w_scale = xs[:3]
    q, sa, za = _activations(x, attrs, axis=-1)
    acc = np.matmul(q.astype(np.int64) - za, w.astype(np.int64).T)
    return _epilogue(acc, 1, sa, w_scale, xs[3] if len(xs) > 3 else None, attrs)


register_op("qlinear_i8", operands=(3, 4), attrs=dict(_EPILOGUE), shape=_qlinear_shape, reference=_ref_qlinear,
            doc="x [..., K] (f32, or u8 quantized) @ w [N, K]^T (i8, scale w_scale [N] per row) + bias [N]")


# -- qconv_i8 ----------------------------------------------------------------------------------------------
# `residual`: the last operand is added before the activation (a ResNet block's skip): f32, or u8 when res_scale > 0
# (dequantised as (r - res_zero) * res_scale), so a block's output can stay uint8 from block to block.
_CONV = {"strides": Attr("ints", ()), "dilations": Attr("ints", ()), "pads": Attr("ints", ()),
         "residual": Attr("bool", False), "res_scale": Attr("float", 0.0), "res_zero": Attr("int", 0)}


def dequantized_residual(r: np.ndarray, attrs) -> np.ndarray:
    """A qconv_i8 residual operand in f32, as the kernel adds it."""
    if attrs.get("res_scale", 0.0) > 0:
        return (r.astype(np.int32) - attrs.get("res_zero", 0)).astype(np.float32) * np.float32(attrs["res_scale"])
    return r


def _qconv_shape(ctx, types, attrs):
    if attrs["residual"]:
        types, res = types[:-1], types[-1]
    _check(ctx, "qconv_i8", types, DType.i8, x_rank=4)
    _check_epilogue(ctx, "qconv_i8", attrs)
    x, w = types[:2]
    if w.rank != 4 or types[2].shape != (w.shape[0],):
        raise ctx.error(f"'qconv_i8' takes w [O, C, KH, KW] and w_scale [O], got {w} and {types[2]}")
    ctx.require_equal(x.shape[1], w.shape[1], f"'qconv_i8' input channels of {x} and {w}")
    out = TensorType(_out_dtype(attrs), (x.shape[0], w.shape[0], *_spatial_out(ctx, "qconv_i8", x, w.shape[2:],
                                                                               attrs)))
    if attrs["residual"]:
        _check_residual(ctx, res, out, attrs)
    return [out]


def _check_residual(ctx, res, out, attrs):
    want = DType.u8 if attrs["res_scale"] > 0 else DType.f32
    if res.dtype is not want or res.rank != 4 or not (0 <= attrs["res_zero"] <= 255) or attrs["res_scale"] < 0:
        raise ctx.error(f"'qconv_i8' residual must be {want} (u8 when res_scale > 0, zero point 0..255) with the "
                        f"output's shape, got {res} with res_scale {attrs['res_scale']}, res_zero {attrs['res_zero']}")
    for i, (a, b) in enumerate(zip(res.shape, out.shape)):
        ctx.require_equal(a, b, f"'qconv_i8' residual {res} dimension {i} against the output {out}")


def _ref_qconv(xs, attrs):
    residual = xs[-1] if attrs.get("residual") else None
    xs = xs[:-1] if residual is not None else xs
    x, w, w_scale = xs[:3]
    q, sa, za = _activations(x, attrs, axis=(1, 2, 3))
    za = np.asarray(za).reshape(-1, 1, 1, 1) if np.ndim(za) else za
    centered = q.astype(np.int64) - za  # padding holds the zero point: 0 once centered
    cols = windows(_pad(centered, attrs["pads"]), w.shape[2:], attrs["strides"], attrs["dilations"])
    acc = np.einsum("nchwij,ocij->nohw", cols, w.astype(np.int64))
    sa = np.asarray(sa).reshape(-1, 1, 1, 1) if np.ndim(sa) else sa
    return _epilogue(acc, 1, sa, w_scale, xs[3] if len(xs) > 3 else None, attrs, col_axis=1, residual=residual)


register_op("qconv_i8", operands=(3, 5), attrs={**_CONV, **_EPILOGUE}, shape=_qconv_shape, reference=_ref_qconv,
            normalize=_normalize_window("qconv_i8"),
            doc="2-D NCHW convolution, groups 1: x (f32, or u8 quantized), w [O, C, KH, KW] i8 with w_scale [O]")


# -- linear_i4 ---------------------------------------------------------------------------------------------
def unpack_int4(packed: np.ndarray, k: int) -> np.ndarray:
    """q [N, K] (0..15) from the kernel's layout: per run of 32 k, byte j holds k j (low) and j + 16 (high)."""
    runs = packed.reshape(packed.shape[0], k // 32, 16)
    return np.concatenate([runs & 15, runs >> 4], axis=2).reshape(packed.shape[0], k)


def pack_int4(q: np.ndarray) -> np.ndarray:
    """The inverse of `unpack_int4`: q [N, K] (0..15, K a multiple of 32) to [N, K / 2] bytes."""
    runs = q.astype(np.uint8).reshape(q.shape[0], -1, 32)
    return (runs[..., :16] | (runs[..., 16:] << 4)).reshape(q.shape[0], -1)


def _linear_i4_shape(ctx, types, attrs):
    x, q, scale, zero = types[:4]
    g = attrs["group"]
    if g not in INT4_GROUPS:
        raise ctx.error(f"'linear_i4' group must be one of {INT4_GROUPS}, got {g}")
    if x.dtype is not DType.f32 or q.dtype is not DType.u8 or scale.dtype is not DType.f32 or \
            zero.dtype is not DType.u8 or (len(types) > 4 and types[4].dtype is not DType.f32):
        raise ctx.error(f"'linear_i4' takes x f32, q u8, scale f32, zero u8, bias f32; got "
                        f"{', '.join(map(str, types))}")
    n, k = q.shape[0], x.shape[-1]
    if not isinstance(k, int) or k % g or q.shape != (n, k // 2) or scale.shape != (n, k // g) or \
            zero.shape != scale.shape or (len(types) > 4 and types[4].shape != (n,)):
        raise ctx.error(f"'linear_i4' with group {g} needs x [..., K] (K a multiple of the group), q [N, K/2], "
                        f"scale and zero [N, K/group], bias [N]; got {', '.join(map(str, types))}")
    return [TensorType(DType.f32, (*x.shape[:-1], n))]


def dequantize_int4(packed, scale, zero, group: int) -> np.ndarray:
    """W [N, K] in float64 from the packed 4-bit values and their per-group scale and zero point."""
    k = packed.shape[1] * 2
    q = unpack_int4(packed, k).astype(np.float64)
    return (q - np.repeat(zero.astype(np.float64), group, axis=1)) * np.repeat(scale.astype(np.float64), group, 1)


def _ref_linear_i4(xs, attrs):
    x, packed, scale, zero = xs[:4]
    y = np.matmul(x.astype(np.float64), dequantize_int4(packed, scale, zero, attrs["group"]).T)
    if len(xs) > 4:
        y = y + xs[4]
    return activate(y, attrs["act"]).astype(np.float32)


register_op("linear_i4", operands=(4, 5), attrs={"group": Attr("int", 32), "act": Attr("str", "none", ACTIVATIONS)},
            shape=_linear_i4_shape, reference=_ref_linear_i4,
            doc="x [..., K] f32 @ W^T + bias, W [N, K] int4 weight-only: q [N, K/2] u8 packed, scale/zero [N, K/group]")
