"""ATen reductions: sum, mean, prod, min/max (with indices), var/std, any/all, norms, argmax, the scans (cumsum,
cumprod, cummax, cummin, logcumsumexp), topk, kthvalue, median and nanmedian, cdist.

An empty or missing `dim` list means every axis, as in PyTorch (and in the IR's `axes`). Sums and means
run in the result dtype, so bool and int sums widen to int64 first, as PyTorch does.
"""
from __future__ import annotations

import math

from ...ir.dtypes import DType
from ...ops.common import norm_axes
from .context import aten
from .convert_elementwise import _arith


def _axes(x, dim) -> tuple:
    if x.type.rank == 0:  # PyTorch takes dim 0 or -1 of a 0-d tensor: the reduction leaves it as it is
        return ()
    if dim is None:
        return tuple(range(x.type.rank))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return norm_axes(dims or range(x.type.rank), x.type.rank, "reduce")


_REDUCE_OPS = {"sum": "reduce_sum", "mean": "reduce_mean", "amax": "reduce_max", "amin": "reduce_min",
               "prod": "reduce_prod", "logsumexp": "logsumexp", "max": "reduce_max", "min": "reduce_min"}


@aten("sum.dim_IntList", "mean.dim", "amax", "amin", "prod.dim_int", "logsumexp")
def reduce(cx, x, dim=None, keepdim=False, *rest):
    return cx.b.emit(_REDUCE_OPS[cx.op_name], cx.tensor(x, cx.out_dtype()), axes=_axes(x, dim),
                     keepdims=bool(keepdim))


@aten("sum.default", "mean.default", "prod.default", "max.default", "min.default")
def reduce_all(cx, x, *rest):
    return cx.b.emit(_REDUCE_OPS[cx.op_name], cx.tensor(x, cx.out_dtype()), keepdims=False)


@aten("max.dim", "min.dim")
def reduce_with_index(cx, x, dim, keepdim=False):
    op = cx.op_name
    if x.type.rank == 0:  # along dim 0 or -1 of a 0-d tensor: the value itself, at index 0
        return x, cx.b.full(0, (), DType.i64)
    values = cx.b.emit(_REDUCE_OPS[op], x, axes=[dim], keepdims=bool(keepdim))
    return values, cx.b.emit("argmax" if op == "max" else "argmin", x, axis=dim, keepdims=bool(keepdim))


aten("max.other")(_arith("max"))
aten("min.other")(_arith("min"))


@aten("var", "std", "var_mean", "std_mean")
def variance(cx, x, *args):
    """Two-pass: the mean, then the sum of squared deviations over (count - correction)."""
    dim, correction, keepdim = _var_args(cx.node.target._overloadname, args)
    axes = _axes(x, dim)
    mean = cx.b.reduce_mean(x, axes=axes, keepdims=True)
    dev = cx.b.sub(x, cx.broadcast(mean, x.type.shape))
    total = cx.b.reduce_sum(cx.b.mul(dev, dev), axes=axes, keepdims=keepdim)
    count = math.prod((x.type.shape[a] for a in axes), start=1) - correction
    var = cx.b.div(total, cx.tensor(count, x.type.dtype, total.type.shape))
    out = cx.b.sqrt(var) if cx.op_name.startswith("std") else var
    if cx.op_name.endswith("_mean"):
        return out, mean if keepdim else cx.b.reshape(mean, shape=total.type.shape)
    return out


def _var_args(overload: str, args) -> tuple:
    """(dim, correction, keepdim) from the overloads: (unbiased), (dim, unbiased, keepdim), (dim, correction,
    keepdim)."""
    if overload.startswith("correction"):
        dim, correction, keepdim = args[:3]
        correction = 1 if correction is None else correction
    elif overload.startswith("dim"):
        dim, unbiased, keepdim = args[:3]
        correction = 1 if unbiased else 0
    else:
        dim, correction, keepdim = None, 1 if args[0] else 0, False
    return dim, int(correction) if correction == int(correction) else correction, bool(keepdim)


@aten("any", "all")
def any_all(cx, x, dim=None, keepdim=False):
    as_int = cx.b.cast(cx.tensor(x, DType.bool), dtype=DType.u8)
    op = "reduce_max" if cx.op_name == "any" else "reduce_min"
    return cx.b.cast(cx.b.emit(op, as_int, axes=_axes(x, dim), keepdims=bool(keepdim)), dtype=DType.bool)


@aten("linalg_vector_norm")
def vector_norm(cx, x, ord=2, dim=None, keepdim=False, dtype=None):
    x = cx.tensor(x, cx.out_dtype())
    axes, keep, t = _axes(x, dim), bool(keepdim), x.type
    if ord in (math.inf, -math.inf):
        return cx.b.emit("reduce_max" if ord > 0 else "reduce_min", cx.b.abs(x), axes=axes, keepdims=keep)
    if ord == 0:  # the number of nonzero elements
        nonzero = cx.b.cast(cx.b.ne(x, cx.tensor(0, t.dtype, t.shape)), dtype=t.dtype)
        return cx.b.reduce_sum(nonzero, axes=axes, keepdims=keep)
    if ord == 1:
        return cx.b.reduce_sum(cx.b.abs(x), axes=axes, keepdims=keep)
    if ord == 2:
        return cx.b.sqrt(cx.b.reduce_sum(cx.b.mul(x, x), axes=axes, keepdims=keep))
    powered = cx.b.pow(cx.b.abs(x), cx.tensor(ord, t.dtype, t.shape))
    total = cx.b.reduce_sum(powered, axes=axes, keepdims=keep)
    return cx.b.pow(total, cx.tensor(1 / ord, t.dtype, total.type.shape))



@aten("_cdist_forward", "cdist")
def cdist(cx, x1, x2, p=2.0, *rest):
    """The p-norm of every row difference: x1[..., P, M] against x2[..., R, M] broadcast to [..., P, R, M]
    (exact, where PyTorch may use |a|^2 + |b|^2 - 2ab for large inputs)."""
    *lead1, rows, m = x1.type.shape
    *lead2, cols, _ = x2.type.shape
    shape = tuple(cx.out_shape()) + (m,)
    a = cx.broadcast(cx.b.reshape(x1, shape=(*lead1, rows, 1, m)), shape)
    b = cx.broadcast(cx.b.reshape(x2, shape=(*lead2, 1, cols, m)), shape)
    return vector_norm(cx, cx.b.sub(a, b), p, [-1])

@aten("dist")
def dist(cx, x, y, p=2):
    """The p-norm of the (broadcast) difference, over every element."""
    x, y = cx.operands([x, y], cx.out_dtype())
    return vector_norm(cx, cx.b.sub(x, y), p)


@aten("argmax", "argmin")
def argmax(cx, x, dim=None, keepdim=False):
    if dim is None:
        flat = cx.b.reshape(x, shape=[x.type.numel])
        return cx.b.reshape(cx.b.emit(cx.op_name, flat, axis=0, keepdims=False), shape=cx.out_shape())
    return cx.b.emit(cx.op_name, x, axis=dim, keepdims=bool(keepdim))


@aten("cumsum", "cumprod")
def cumsum(cx, x, dim, dtype=None):
    return cx.b.emit(cx.op_name, cx.tensor(x, cx.out_dtype()), axis=dim)


@aten("cummax", "cummin")
def cum_extreme(cx, x, dim):
    if x.type.rank == 0:  # along dim 0 or -1 of a 0-d tensor: the value itself, at index 0
        return x, cx.b.full(0, (), DType.i64)
    return cx.b.emit(cx.op_name, x, axis=dim)


@aten("logcumsumexp")
def logcumsumexp(cx, x, dim):
    x = cx.tensor(x, cx.out_dtype())
    return x if x.type.rank == 0 else cx.b.logcumsumexp(x, axis=dim)


@aten("topk")
def topk(cx, x, k, dim=-1, largest=True, sorted=True):
    return cx.b.topk(x, k=k, axis=dim, largest=bool(largest), sorted=bool(sorted))



@aten("kthvalue")
def kthvalue(cx, x, k, dim=-1, keepdim=False):
    """The k-th smallest along `dim` and its index, from an ascending `topk`."""
    return _kth(cx, x, k, dim, keepdim)


@aten("median")
def median(cx, x, dim=None, keepdim=False):
    """The lower middle (k = (n+1)//2) along `dim`; without a dim, of the flattened tensor, the value alone."""
    if dim is None:
        flat = cx.b.reshape(x, shape=(math.prod(x.type.shape, start=1),))
        return cx.b.reshape(_kth(cx, flat, None, 0)[0], shape=())
    return _kth(cx, x, None, dim, keepdim)


def _kth(cx, x, k, dim, keepdim=False):
    if x.type.rank == 0:  # dim 0 or -1 of a 0-d tensor: the value itself, at index 0
        norm_axes([dim], 1, cx.op_name)
        values, idx = _kth(cx, cx.b.reshape(x, shape=(1,)), k, 0)
        return cx.b.reshape(values, shape=()), cx.b.reshape(idx, shape=())
    axis = norm_axes([dim], x.type.rank, cx.op_name)[0]
    n = x.type.shape[axis]
    if k is None:
        if not isinstance(n, int):
            raise cx.error("median along a symbolic axis is not supported")
        k = (n + 1) // 2
    values, idx = cx.b.topk(x, k=k, axis=axis, largest=False, sorted=True)
    return _squeezed(cx, [cx.b.slice(v, starts=[k - 1], ends=[k], axes=[axis]) for v in (values, idx)], axis, keepdim)


def _squeezed(cx, picked, axis, keepdim):
    """The picked values and indices (size 1 along axis) without that axis unless keepdim."""
    if keepdim:
        return tuple(picked)
    shape = picked[0].type.shape[:axis] + picked[0].type.shape[axis + 1:]
    return tuple(cx.b.reshape(v, shape=shape) for v in picked)


@aten("nanmedian")
def nanmedian(cx, x, dim=None, keepdim=False):
    """The lower middle of the values that are not NaN (NaN where every one is): an ascending sort puts NaN last,
    so the pick is at (count - 1) // 2 of each line's count of numbers."""
    if dim is None or x.type.rank == 0:
        flat = cx.b.reshape(x, shape=(math.prod(x.type.shape, start=1),))
        values, idx = nanmedian(cx, flat, 0, keepdim=False)
        return cx.b.reshape(values, shape=()) if dim is None else (cx.b.reshape(values, shape=()),
                                                                    cx.b.reshape(idx, shape=()))
    axis = norm_axes([dim], x.type.rank, cx.op_name)[0]
    n = x.type.shape[axis]
    if not isinstance(n, int):
        raise cx.error("nanmedian along a symbolic axis is not supported")
    values, idx = cx.b.topk(x, k=n, axis=axis, largest=False, sorted=True)
    numbers = cx.b.reduce_sum(cx.b.cast(cx.b.emit("not", cx.b.isnan(x)), dtype=DType.i64), axes=[axis], keepdims=True)
    one = cx.b.full(1, numbers.type.shape, DType.i64)
    pos = cx.b.max(cx.b.floordiv(cx.b.sub(numbers, one), cx.b.add(one, one)), cx.b.full(0, numbers.type.shape,
                                                                                         DType.i64))
    return _squeezed(cx, [cx.b.gather_elements(v, pos, axis=axis) for v in (values, idx)], axis, keepdim)
