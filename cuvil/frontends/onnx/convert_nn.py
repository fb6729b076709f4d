"""Neural-network ops: MatMul, Gemm, Conv, ConvTranspose, pooling (auto_pad resolved here; dilated average and
Lp pools as convolutions with a kernel of ones; MaxPool's indices through a window table), LRN, Dropout, Einsum."""
from __future__ import annotations

import math

import numpy as np

from ...ir.dtypes import DType
from ...ops.nn import window_out
from .context import broadcast_dims
from .convert_random import dropout_training
from .registry import converter


# -- matmul, gemm ---------------------------------------------------------------------------------------------
@converter("MatMul")
def matmul(ctx):
    """NumPy matmul: a 1-D side gets a unit dim that is dropped again; batch dims broadcast."""
    a, b = ctx.x(0), ctx.x(1)
    a2 = ctx.b.reshape(a, shape=(1,) + a.type.shape) if a.type.rank == 1 else a
    b2 = ctx.b.reshape(b, shape=b.type.shape + (1,)) if b.type.rank == 1 else b
    if a2.type.rank > 2 and b2.type.rank > 2 or a2.type.rank > 2 and b.type.rank == 1:
        batch = broadcast_dims(a2.type.shape[:-2], b2.type.shape[:-2], ctx)
        a2 = ctx.expand(a2, batch + a2.type.shape[-2:])
        b2 = ctx.expand(b2, batch + b2.type.shape[-2:]) if b2.type.rank > 2 else b2
    y = ctx.b.matmul(a2, b2)
    shape = y.type.shape
    if a.type.rank == 1:
        shape = shape[:-2] + shape[-1:]
    if b.type.rank == 1:
        shape = shape[:-1]
    return [ctx.reshape(y, shape)]


@converter("Gemm")
def gemm(ctx):
    a, b = ctx.x(0), ctx.x(1)
    a = ctx.b.transpose(a, perm=(1, 0)) if ctx.attr("transA", 0) else a
    b = ctx.b.transpose(b, perm=(1, 0)) if ctx.attr("transB", 0) else b
    y = ctx.b.matmul(a, b)
    alpha, beta = ctx.attr("alpha", 1.0), ctx.attr("beta", 1.0)
    if alpha != 1.0:
        y = ctx.b.mul(y, ctx.scalar_like(alpha, y))
    if ctx.has(2) and beta != 0.0:
        c = ctx.expand(ctx.x(2), y.type.shape)
        y = ctx.b.add(y, c if beta == 1.0 else ctx.b.mul(c, ctx.scalar_like(beta, c)))
    return [y]


# -- windows --------------------------------------------------------------------------------------------------
def window_pads(ctx, in_sizes: tuple, kernel: tuple, strides: tuple, dilations: tuple) -> tuple:
    """Explicit pads (begins, then ends) from `pads` or `auto_pad` (SAME_* keep ceil(in / stride) outputs)."""
    auto = ctx.attr("auto_pad", "NOTSET")
    s = len(kernel)
    if auto in ("NOTSET", ""):
        return tuple(ctx.attr("pads", [0] * (2 * s)))
    if auto == "VALID":
        return (0,) * (2 * s)
    begins, ends = [], []
    for n, k, st, d in zip(in_sizes, kernel, strides, dilations):
        span = (k - 1) * d + 1
        if st == 1:
            total = span - 1
        elif isinstance(n, int):
            total = max((-(-n // st) - 1) * st + span - n, 0)
        else:
            raise ctx.unsupported(f"auto_pad {auto} with stride {st} needs static spatial sizes")
        small, big = total // 2, total - total // 2
        begins.append(small if auto == "SAME_UPPER" else big)
        ends.append(big if auto == "SAME_UPPER" else small)
    return tuple(begins + ends)


def _window_attrs(ctx, x, kernel: tuple) -> dict:
    s = len(kernel)
    strides = tuple(ctx.attr("strides", [1] * s))
    dilations = tuple(ctx.attr("dilations", [1] * s))
    pads = window_pads(ctx, x.type.shape[2:], kernel, strides, dilations)
    return {"strides": strides, "dilations": dilations, "pads": pads}


def conv_attrs(ctx, x, w) -> dict:
    """The IR conv attributes of a Conv-like node (ConvInteger and QLinearConv share them)."""
    kernel = tuple(ctx.attr("kernel_shape", w.type.shape[2:]))
    return {**_window_attrs(ctx, x, kernel), "groups": ctx.attr("group", 1)}


@converter("Conv")
def conv(ctx):
    x, w = ctx.x(0), ctx.x(1)
    operands = [x, w] + ([ctx.x(2)] if ctx.has(2) else [])
    return [ctx.b.conv(*operands, **conv_attrs(ctx, x, w))]


@converter("ConvTranspose")
def conv_transpose(ctx):
    x, w = ctx.x(0), ctx.x(1)
    s = x.type.rank - 2
    kernel = tuple(ctx.attr("kernel_shape", w.type.shape[2:]))
    strides = tuple(ctx.attr("strides", [1] * s))
    dil = tuple(ctx.attr("dilations", [1] * s))
    out_pad = list(ctx.attr("output_padding", [0] * s))
    out_shape = ctx.attr("output_shape")
    auto = ctx.attr("auto_pad", "NOTSET")
    if out_shape is None and auto in ("SAME_UPPER", "SAME_LOWER"):
        out_shape = [n * st for n, st in zip(x.type.shape[2:], strides)]
    if out_shape is None:
        pads = tuple(ctx.attr("pads", [0] * (2 * s))) if auto != "VALID" else (0,) * (2 * s)
    else:
        pads = _transpose_pads(ctx, x.type.shape[2:], kernel, strides, dil, out_pad, list(out_shape)[-s:], auto)
    operands = [x, w] + ([ctx.x(2)] if ctx.has(2) else [])
    return [ctx.b.conv_transpose(*operands, strides=strides, dilations=dil, pads=pads, output_padding=tuple(out_pad),
                                 groups=ctx.attr("group", 1))]


def _transpose_pads(ctx, sizes, kernel, strides, dil, out_pad: list, out_shape: list, auto: str) -> tuple:
    """Pads that give the requested output_shape (the spec's total_padding split); a negative total grows
    output_padding instead."""
    begins, ends = [], []
    for i, (n, k, st, d, want) in enumerate(zip(sizes, kernel, strides, dil, out_shape)):
        total = st * (n - 1) + out_pad[i] + (k - 1) * d + 1 - want
        if not isinstance(total, int):
            raise ctx.unsupported("output_shape with symbolic input sizes is not supported")
        if total < 0:
            out_pad[i], total = out_pad[i] - total, 0
        half = total // 2
        begins.append(half if auto == "SAME_UPPER" else total - half)
        ends.append(total - half if auto == "SAME_UPPER" else half)
    return tuple(begins + ends)


def _pool_attrs(ctx, x) -> dict:
    kernel = tuple(ctx.attr("kernel_shape"))
    attrs = _window_attrs(ctx, x, kernel)
    return {"kernel": kernel, "ceil_mode": bool(ctx.attr("ceil_mode", 0)), **attrs}


@converter("MaxPool")
def max_pool(ctx):
    x = ctx.x(0)
    if len(ctx.node.output) > 1 and ctx.node.output[1]:
        return _max_pool_with_indices(ctx, x, _pool_attrs(ctx, x))
    return [ctx.b.max_pool(x, **_pool_attrs(ctx, x))]


def _window_tables(spatial, attrs, order: str) -> tuple:
    """For every output position and kernel tap: its flat position in the padded input and its flat index in
    the unpadded one (`order` "C" row-major, "F" column-major); and the padded sizes."""
    s = len(spatial)
    pads, kernel = attrs["pads"], attrs["kernel"]
    geo = list(zip(spatial, kernel, attrs["strides"], attrs["dilations"], pads[:s], pads[s:]))
    out = [window_out(*g, attrs["ceil_mode"]) for g in geo]
    padded = [max(n + pb + pe, (o - 1) * st + d * (k - 1) + 1) for o, (n, k, st, d, pb, pe) in zip(out, geo)]
    o_idx = np.indices(out).reshape(s, -1, 1)
    k_idx = np.indices(kernel).reshape(s, 1, -1)
    at = [o_idx[i] * geo[i][2] + k_idx[i] * geo[i][3] for i in range(s)]
    flat_padded = np.ravel_multi_index(at, padded)
    orig = [np.clip(a - geo[i][4], 0, spatial[i] - 1) for i, a in enumerate(at)]
    return flat_padded, np.ravel_multi_index(orig, spatial, order=order), padded, out


def _max_pool_with_indices(ctx, x, attrs):
    """Values and indices (flat over the whole input; the spatial part row- or column-major by storage_order) of
    each window's first maximum: windows are gathered from the padded, flattened input through a table."""
    spatial = x.type.shape[2:]
    if not x.type.is_static:
        raise ctx.unsupported("MaxPool's Indices output needs static shapes")
    n, c = x.type.shape[:2]
    s = len(spatial)
    where, orig, padded_sizes, out = _window_tables(spatial, attrs, "F" if ctx.attr("storage_order", 0) else "C")
    low = -math.inf if x.type.dtype.is_float else float(np.iinfo(x.type.dtype.numpy).min)
    ends = tuple(p - d - b for p, d, b in zip(padded_sizes, spatial, attrs["pads"][:s]))
    padded = ctx.b.pad(x, pads=(0, 0) + attrs["pads"][:s] + (0, 0) + ends, value=low)
    flat = ctx.b.reshape(padded, shape=(n, c, math.prod(padded_sizes)))
    windows = ctx.b.gather(flat, ctx.const(where), axis=2)
    best = ctx.b.argmax(windows, axis=3, keepdims=True)
    table = ctx.expand(ctx.const(orig.reshape((1, 1) + orig.shape)), windows.type.shape)
    local = ctx.b.reshape(ctx.b.gather_elements(table, best, axis=3), shape=(n, c, len(where)))
    plane = ctx.b.iota(shape=local.type.shape, axis=0, dtype=DType.i64)
    plane = ctx.b.add(ctx.b.mul(plane, ctx.scalar_like(c, plane)), ctx.b.iota(shape=local.type.shape, axis=1))
    index = ctx.b.add(local, ctx.b.mul(plane, ctx.scalar_like(math.prod(spatial), plane)))
    values = ctx.b.reduce_max(windows, axes=(3,), keepdims=False)
    shape = (n, c, *out)
    return [ctx.b.reshape(values, shape=shape), ctx.b.reshape(index, shape=shape)]


def _window_sum(ctx, x, attrs: dict, pad_value: float):
    """Sums over (dilated) pooling windows as a depthwise convolution with a kernel of ones; the ceil-mode
    overhang at the end is padded with zeros, the explicit pads with `pad_value`."""
    kernel, s = attrs["kernel"], len(attrs["kernel"])
    pads = attrs["pads"]
    geo = list(zip(x.type.shape[2:], kernel, attrs["strides"], attrs["dilations"], pads[:s], pads[s:]))
    if not all(isinstance(n, int) for n in x.type.shape[2:]):
        raise ctx.unsupported("dilated pooling needs static spatial sizes")
    out = [window_out(*g, attrs["ceil_mode"]) for g in geo]
    over = [max(0, (o - 1) * st + d * (k - 1) + 1 - (n + pb + pe)) for o, (n, k, st, d, pb, pe) in zip(out, geo)]
    padded = ctx.b.pad(x, pads=(0, 0) + attrs["pads"][:s] + (0, 0) + attrs["pads"][s:], value=pad_value)
    padded = ctx.b.pad(padded, pads=(0,) * (s + 2) + (0, 0) + tuple(over))
    ones = ctx.b.full(1.0, (x.type.shape[1], 1) + kernel, x.type.dtype)
    return ctx.b.conv(padded, ones, strides=attrs["strides"], dilations=attrs["dilations"], groups=x.type.shape[1])


def _dilated_mean(ctx, x, attrs: dict, include_pad: bool):
    total = _window_sum(ctx, x, attrs, 0.0)
    ones = ctx.b.full(1.0, (1, 1) + x.type.shape[2:], x.type.dtype)
    count = _window_sum(ctx, ones, attrs, 1.0 if include_pad else 0.0)
    return ctx.b.div(total, ctx.expand(count, total.type.shape))


@converter("AveragePool")
def avg_pool(ctx):
    x = ctx.x(0)
    attrs = _pool_attrs(ctx, x)
    include_pad = bool(ctx.attr("count_include_pad", 0))
    if any(d != 1 for d in attrs["dilations"]):
        return [_dilated_mean(ctx, x, attrs, include_pad)]
    del attrs["dilations"]
    return [ctx.b.avg_pool(x, count_include_pad=include_pad, **attrs)]


@converter("LpPool")
def lp_pool(ctx):
    x, p = ctx.x(0), ctx.attr("p", 2)
    attrs = _pool_attrs(ctx, x)
    powered = ctx.b.pow(ctx.b.abs(x), ctx.scalar_like(p, x))
    total = _window_sum(ctx, powered, attrs, 0.0)
    return [ctx.b.pow(total, ctx.scalar_like(1.0 / p, total))]


@converter("GlobalAveragePool")
def global_avg_pool(ctx):
    return [ctx.b.global_avg_pool(ctx.x(0))]


@converter("GlobalMaxPool")
def global_max_pool(ctx):
    return [ctx.b.global_max_pool(ctx.x(0))]


@converter("GlobalLpPool")
def global_lp_pool(ctx):
    x, p = ctx.x(0), ctx.attr("p", 2)
    total = ctx.b.reduce_sum(ctx.b.pow(ctx.b.abs(x), ctx.scalar_like(p, x)), axes=tuple(range(2, x.type.rank)))
    return [ctx.b.pow(total, ctx.scalar_like(1.0 / p, total))]


@converter("LRN")
def lrn(ctx):
    """Sum of squares over a window of channels: an average pool over [N, 1, C, rest], times its size."""
    x, size = ctx.x(0), ctx.attr("size")
    n, c = x.type.shape[:2]
    rest = math.prod(x.type.shape[2:], start=1)
    sq = ctx.b.reshape(ctx.b.mul(x, x), shape=(n, 1, c, rest))
    before = (size - 1) // 2
    window = ctx.b.avg_pool(sq, kernel=(size, 1), pads=(before, 0, size - 1 - before, 0), count_include_pad=True)
    total = ctx.b.reshape(window, shape=x.type.shape)
    scale = ctx.b.add(ctx.scalar_like(ctx.attr("bias", 1.0), x),
                      ctx.b.mul(total, ctx.scalar_like(ctx.attr("alpha", 1e-4), x)))
    return [ctx.b.div(x, ctx.b.pow(scale, ctx.scalar_like(ctx.attr("beta", 0.75), x)))]


@converter("Dropout")
def dropout(ctx):
    """Inference: the identity, and an all-true mask. Training mode with a ratio above 0 drops elements at random
    (convert_random.py)."""
    x = ctx.x(0)
    training = ctx.known_scalar(2, "training_mode", 0) if ctx.opset >= 12 else 0
    ratio = ctx.known_scalar(1, "ratio", 0.5) if ctx.opset >= 12 else ctx.attr("ratio", 0.5)
    if training and ratio:
        return dropout_training(ctx, x, ratio)
    return [x, ctx.b.full(1.0, x.type.shape, DType.bool)]


@converter("Einsum")
def einsum(ctx):
    return [ctx.b.einsum(*[ctx.x(i) for i in range(len(ctx.inputs)) if ctx.has(i)], equation=ctx.attr("equation"))]
