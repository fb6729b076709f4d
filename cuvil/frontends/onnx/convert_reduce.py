"""Reductions and scans: Reduce* (axes as attribute or input by opset, noop_with_empty_axes), ArgMax/ArgMin,
CumSum, CumProd (a log-step scan of products), TopK and Hardmax."""
from __future__ import annotations

import math

import numpy as np

from ...ir.dtypes import DType
from .registry import converter

# The opset from which `axes` is an input rather than an attribute (18 for the ops not listed).
_AXES_INPUT_SINCE = {"ReduceSum": 13}


def reduce_axes(ctx, rank: int):
    """The axes to reduce (None: all), or False for "no reduction" (noop_with_empty_axes and no axes)."""
    since = _AXES_INPUT_SINCE.get(ctx.op_type, 18)
    if ctx.opset < since:
        axes = ctx.attr("axes")
    else:
        axes = list(ctx.dims(1, "axes")) if ctx.has(1) else None
    if not axes:
        return False if ctx.attr("noop_with_empty_axes", 0) and ctx.opset >= since else None
    return tuple(a + rank if a < 0 else a for a in axes)


def _float(ctx, x):
    return x if x.type.dtype.is_float else ctx.cast(x, DType.f64)


def _square(ctx, x):
    return ctx.b.mul(x, x)


# name -> (IR reduction, prepare x, finish the reduced value)
_REDUCTIONS = {
    "ReduceSum": ("reduce_sum", None, None),
    "ReduceMean": ("reduce_mean", _float, None),
    "ReduceMax": ("reduce_max", None, None),
    "ReduceMin": ("reduce_min", None, None),
    "ReduceProd": ("reduce_prod", None, None),
    "ReduceL1": ("reduce_sum", lambda ctx, x: ctx.b.abs(x), None),
    "ReduceL2": ("reduce_sum", lambda ctx, x: _square(ctx, _float(ctx, x)), lambda ctx, y: ctx.b.sqrt(y)),
    "ReduceSumSquare": ("reduce_sum", _square, None),
    "ReduceLogSum": ("reduce_sum", _float, lambda ctx, y: ctx.b.log(y)),
    "ReduceLogSumExp": ("logsumexp", _float, None),
}


def _reduction(ir_op, prepare, finish):
    def convert(ctx):
        x0 = ctx.x(0)
        axes = reduce_axes(ctx, x0.type.rank)
        if axes is False:
            return [x0]
        x = prepare(ctx, x0) if prepare else x0
        x = ctx.cast(x, DType.u8) if x.type.dtype is DType.bool else x  # max/min of bools: any/all
        y = ctx.b.emit(ir_op, x, axes=axes or (), keepdims=bool(ctx.attr("keepdims", 1)))
        y = finish(ctx, y) if finish else y
        return [ctx.cast(y, x0.type.dtype)]
    return convert


for _onnx, (_ir, _prep, _fin) in _REDUCTIONS.items():
    converter(_onnx)(_reduction(_ir, _prep, _fin))


@converter("LpNormalization")
def lp_normalization(ctx):
    x, p = ctx.x(0), ctx.attr("p", 2)
    axis = ctx.attr("axis", -1)
    axis = axis + x.type.rank if axis < 0 else axis
    if p == 1:
        norm = ctx.b.reduce_sum(ctx.b.abs(x), axes=(axis,), keepdims=True)
    else:
        norm = ctx.b.sqrt(ctx.b.reduce_sum(ctx.b.mul(x, x), axes=(axis,), keepdims=True))
    norm = ctx.expand(norm, x.type.shape)
    zero = ctx.b.eq(norm, ctx.scalar_like(0, norm))
    return [ctx.b.where(zero, ctx.scalar_like(0, x), ctx.b.div(x, ctx.b.where(zero, ctx.scalar_like(1, norm), norm)))]


@converter("ArgMax", "ArgMin")
def arg_reduce(ctx):
    return [ctx.b.emit(ctx.op_type.lower(), ctx.x(0), axis=ctx.attr("axis", 0), keepdims=bool(ctx.attr("keepdims", 1)),
                       select_last_index=bool(ctx.attr("select_last_index", 0)))]


@converter("CumSum")
def cumsum(ctx):
    return [ctx.b.cumsum(ctx.x(0), axis=ctx.known_scalar(1, "axis"), exclusive=bool(ctx.attr("exclusive", 0)),
                         reverse=bool(ctx.attr("reverse", 0)))]


def _reverse(ctx, x, axis):
    return ctx.b.slice(x, starts=(-1,), ends=(-2 ** 63,), axes=(axis,), steps=(-1,))


def _shift(ctx, x, axis, by):
    """x moved `by` places along axis, the front filled with 1 (the product's identity)."""
    n = x.type.shape[axis]
    kept = ctx.b.slice(x, starts=(0,), ends=(n - by,), axes=(axis,))
    pads = [0] * (2 * x.type.rank)
    pads[axis] = by
    return ctx.b.pad(kept, pads=pads, value=1.0)


@converter("CumProd")
def cumprod(ctx):
    """Hillis-Steele scan: after step k each element holds the product of the 2^k elements ending at it."""
    x, axis = ctx.x(0), ctx.known_scalar(1, "axis")
    axis = axis + x.type.rank if axis < 0 else axis
    n = x.type.shape[axis]
    if not isinstance(n, int):
        raise ctx.unsupported("the scanned axis must have a static size")
    y = _reverse(ctx, x, axis) if ctx.attr("reverse", 0) else x
    if ctx.attr("exclusive", 0) and n:
        y = _shift(ctx, y, axis, 1)
    step = 1
    while step < n:
        y = ctx.b.mul(y, _shift(ctx, y, axis, step))
        step *= 2
    return [_reverse(ctx, y, axis) if ctx.attr("reverse", 0) else y]


@converter("TopK")
def topk(ctx):
    if ctx.opset >= 10 and ctx.known(1) is None:
        return _topk_computed_k(ctx)
    k = ctx.attr("k") if ctx.opset < 10 else ctx.known_scalar(1, "k")
    values, indices = ctx.b.topk(ctx.x(0), k=k, axis=ctx.attr("axis", -1), largest=bool(ctx.attr("largest", 1)),
                                 sorted=bool(ctx.attr("sorted", 1)))
    return [values, indices]


def _topk_computed_k(ctx):
    """k known only at run time: the whole axis sorted, then its first k (a data-dependent size; k outside [0, the
    axis length] is an index error, as in ONNX Runtime)."""
    x = ctx.x(0)
    axis = ctx.attr("axis", -1) % max(x.type.rank, 1)
    if not isinstance(x.type.shape[axis], int):
        raise ctx.unsupported(f"TopK with a computed k needs a static length of axis {axis}, got {x.type}")
    ranked = ctx.b.topk(x, k=x.type.shape[axis], axis=axis, largest=bool(ctx.attr("largest", 1)), sorted=True)
    k = ctx.b.reshape(ctx.cast(ctx.x(1), DType.i64), shape=(1,))
    return list(ctx.b.dynamic_slice(ctx.const(np.zeros(1, np.int64)), k, *ranked, axis=axis, exact=True))


def coerce_2d(ctx, x, default_axis_before_13: int = 1):
    """Before opset 13, Softmax-like ops see x as 2-D: [prod(dims before axis), prod(dims from axis)]."""
    rank = x.type.rank
    axis = ctx.attr("axis", default_axis_before_13)
    axis = axis + rank if axis < 0 else axis
    return ctx.b.reshape(x, shape=(math.prod(x.type.shape[:axis], start=1), math.prod(x.type.shape[axis:], start=1)))


@converter("Hardmax")
def hardmax(ctx):
    x = ctx.x(0)
    flat = coerce_2d(ctx, x) if ctx.opset < 13 else x
    axis = 1 if ctx.opset < 13 else ctx.attr("axis", -1)
    axis = axis + flat.type.rank if axis < 0 else axis
    best = ctx.b.argmax(flat, axis=axis, keepdims=True)
    hit = ctx.b.eq(ctx.expand(best, flat.type.shape), ctx.b.iota(shape=flat.type.shape, axis=axis, dtype=DType.i64))
    return [ctx.b.reshape(ctx.b.cast(hit, dtype=x.type.dtype), shape=x.type.shape)]


@converter("Det")
def det(ctx):
    """The determinant of each [..., n, n] matrix: it reduces the last two axes (cuvil/ops/linalg.py's LU)."""
    return [ctx.b.det(ctx.x(0))]
