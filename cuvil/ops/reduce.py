"""Reductions along axes (`reduce_sum` ... `logsumexp`), index reductions (`argmax`, `argmin`), `cumsum`, `topk`.

Axes are normalised at build time (non-negative, sorted, deduplicated; no axes means all of them), so
equivalent programs print alike. Float references accumulate in float64 and round once; integer sums and
products accumulate in int64 and wrap to the operand's type, as C would. A reduction over an empty axis
gives the identity (0 for sums, 1 for products, the lowest value for max), as ONNX specifies.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.dtypes import DType
from ..ir.types import TensorType
from .common import norm_axes, norm_axis, require_dtype
from ..errors import UnsupportedError
from .registry import Attr, register_op

_AXES = {"axes": Attr("ints", ()), "keepdims": Attr("bool", True)}


def _numeric(d: DType) -> bool:
    return d is not DType.bool


def _float(d: DType) -> bool:
    return d.is_float


def _is_float_array(x) -> bool:
    return DType.from_numpy(x.dtype).is_float


def _wide(x):
    """The operand in the accumulation type: float64 for floats, int64 for integers."""
    return x.astype(np.float64 if _is_float_array(x) else np.int64)


def reduced_shape(shape, axes, keepdims: bool) -> tuple:
    """`shape` with `axes` set to 1 (keepdims) or dropped."""
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)


def _norm_axes(name):
    def normalize(types, attrs):
        rank = types[0].rank
        return {**attrs, "axes": norm_axes(attrs["axes"] or range(rank), rank, name)}
    return normalize


def _reduce_shape(name, accepts):
    def shape(ctx, types, attrs):
        t = types[0]
        require_dtype(ctx, t, accepts, name)
        return [t.with_shape(reduced_shape(t.shape, attrs["axes"], attrs["keepdims"]))]
    return shape


def _lowest(x):
    return -np.inf if _is_float_array(x) else np.iinfo(x.dtype).min


def _highest(x):
    return np.inf if _is_float_array(x) else np.iinfo(x.dtype).max


# name -> (accepted dtypes, fn(wide array, axes, keepdims, original array))
_REDUCTIONS = {
    "reduce_sum": (_numeric, lambda w, ax, kd, x: np.sum(w, axis=ax, keepdims=kd)),
    "reduce_prod": (_numeric, lambda w, ax, kd, x: np.prod(w, axis=ax, keepdims=kd)),
    "reduce_max": (_numeric, lambda w, ax, kd, x: np.max(w, axis=ax, keepdims=kd, initial=_lowest(x))),
    "reduce_min": (_numeric, lambda w, ax, kd, x: np.min(w, axis=ax, keepdims=kd, initial=_highest(x))),
}


def _reduce_ref(fn):
    def ref(xs, a):
        x = xs[0]
        with np.errstate(all="ignore"):
            return np.asarray(fn(_wide(x), a["axes"], a["keepdims"], x)).astype(x.dtype)
    return ref


for _name, (_accepts, _fn) in _REDUCTIONS.items():
    register_op(_name, shape=_reduce_shape(_name, _accepts), reference=_reduce_ref(_fn), attrs=_AXES,
                normalize=_norm_axes(_name), traits={"reduction"})


# -- composites: mean and logsumexp ----------------------------------------------------------------------
def _count(t: TensorType, axes):
    return math.prod((t.shape[i] for i in axes), start=1)


def _dec_mean(b, ops, a):
    x = ops[0]
    total = b.reduce_sum(x, axes=a["axes"], keepdims=a["keepdims"])
    count = b.dim_size(dim=[_count(x.type, a["axes"])], dtype=x.type.dtype)  # symbolic counts are bound at run time
    return b.div(total, b.broadcast_to(count, shape=total.type.shape))


def _ref_mean(xs, a):
    x = xs[0]
    with np.errstate(all="ignore"):
        return np.asarray(np.mean(_wide(x), axis=a["axes"], keepdims=a["keepdims"])).astype(x.dtype)


def _dec_logsumexp(b, ops, a):
    """max + log(sum(exp(x - max))); an infinite max is replaced by 0 so all -inf gives -inf, not NaN."""
    x = ops[0]
    dtype = x.type.dtype
    m = b.reduce_max(x, axes=a["axes"], keepdims=True)
    m = b.where(b.isinf(m), b.full(0.0, m.type.shape, dtype), m)
    total = b.reduce_sum(b.exp(b.sub(x, b.broadcast_to(m, shape=x.type.shape))), axes=a["axes"],
                         keepdims=a["keepdims"])
    return b.add(b.log(total), b.reshape(m, shape=total.type.shape))


def _ref_logsumexp(xs, a):
    x = xs[0]
    w = x.astype(np.float64)
    with np.errstate(all="ignore"):
        m = np.max(w, axis=a["axes"], keepdims=True, initial=-np.inf)
        m = np.where(np.isinf(m), 0.0, m)
        out = np.log(np.sum(np.exp(w - m), axis=a["axes"], keepdims=True)) + m
    return out.reshape(reduced_shape(x.shape, a["axes"], a["keepdims"])).astype(x.dtype)


register_op("reduce_mean", shape=_reduce_shape("reduce_mean", _float), reference=_ref_mean, attrs=_AXES,
            normalize=_norm_axes("reduce_mean"), decompose=_dec_mean, traits={"reduction"})
register_op("logsumexp", shape=_reduce_shape("logsumexp", _float), reference=_ref_logsumexp, attrs=_AXES,
            normalize=_norm_axes("logsumexp"), decompose=_dec_logsumexp, traits={"reduction"})


# -- ops along one axis ----------------------------------------------------------------------------------
def _norm_axis(name):
    def normalize(types, attrs):
        return {**attrs, "axis": norm_axis(attrs["axis"], types[0].rank, name)}
    return normalize


def _axis_operand(ctx, t: TensorType, name: str) -> None:
    """Ops along one axis need a tensor of rank >= 1 with a numeric element type."""
    require_dtype(ctx, t, _numeric, name)
    if t.rank == 0:
        raise ctx.error(f"'{name}' needs an operand of rank >= 1, got {t}")


def _arg_shape(name):
    def shape(ctx, types, a):
        t = types[0]
        _axis_operand(ctx, t, name)
        if t.shape[a["axis"]] == 0:
            raise ctx.error(f"'{name}' cannot reduce the empty axis {a['axis']} of {t}")
        return [TensorType(DType.i64, reduced_shape(t.shape, (a["axis"],), a["keepdims"]))]
    return shape


def _arg_ref(fn):
    def ref(xs, a):
        x, axis = xs[0], a["axis"]
        if a["select_last_index"]:  # search the reversed axis and map the index back
            idx = x.shape[axis] - 1 - fn(np.flip(x, axis), axis=axis, keepdims=True)
        else:
            idx = fn(x, axis=axis, keepdims=True)
        return idx.reshape(reduced_shape(x.shape, (axis,), a["keepdims"])).astype(np.int64)
    return ref


_ARG_ATTRS = {"axis": Attr("int", 0), "keepdims": Attr("bool", True), "select_last_index": Attr("bool", False)}
register_op("argmax", shape=_arg_shape("argmax"), reference=_arg_ref(np.argmax), attrs=_ARG_ATTRS,
            normalize=_norm_axis("argmax"), doc="index of the first (or last) largest value along axis, as i64")
register_op("argmin", shape=_arg_shape("argmin"), reference=_arg_ref(np.argmin), attrs=_ARG_ATTRS,
            normalize=_norm_axis("argmin"), doc="index of the first (or last) smallest value along axis, as i64")


def _scan_shape(name):
    def shape(ctx, types, a):
        _axis_operand(ctx, types[0], name)
        return [types[0]]
    return shape


def _scan_ref(scan, identity):
    def ref(xs, a):
        x, axis = xs[0], a["axis"]
        w = np.flip(_wide(x), axis) if a["reverse"] else _wide(x)
        if a["exclusive"]:  # the identity in front, the last running value dropped: out[i] combines w[:i]
            pad = [(0, 0)] * w.ndim
            pad[axis] = (1, 0)
            out = np.take(scan(np.pad(w, pad, constant_values=identity), axis=axis), np.arange(x.shape[axis]),
                          axis=axis)
        else:
            out = scan(w, axis=axis)
        return (np.flip(out, axis) if a["reverse"] else out).astype(x.dtype)
    return ref


_SCAN_ATTRS = {"axis": Attr("int"), "exclusive": Attr("bool", False), "reverse": Attr("bool", False)}
register_op("cumsum", shape=_scan_shape("cumsum"), reference=_scan_ref(np.cumsum, 0), normalize=_norm_axis("cumsum"),
            attrs=_SCAN_ATTRS,
            doc="running sum along axis (ONNX CumSum: exclusive skips the current element, reverse runs backwards)")
register_op("cumprod", shape=_scan_shape("cumprod"), reference=_scan_ref(np.cumprod, 1),
            normalize=_norm_axis("cumprod"), attrs=_SCAN_ATTRS, doc="running product along axis (as cumsum)")


# -- cummax, cummin, logcumsumexp: scans decomposed into log2(n) shift-and-combine steps (Hillis and Steele) -------
def _scan_steps(name, x, axis: int):
    """The shifts 1, 2, 4, ... below the axis length, which must be static."""
    n = x.type.shape[axis]
    if not isinstance(n, int):
        raise UnsupportedError(f"'{name}' along an axis of symbolic size {n} is not supported (it needs a static "
                               f"length: give that dimension a fixed size)")
    return [1 << k for k in range(max(n - 1, 0).bit_length())]


def _shifted(b, v, axis: int, s: int):
    """v moved s places along axis (zeros in front), and where that leaves a real earlier element."""
    rank = v.type.rank
    pads = [0] * (2 * rank)
    pads[axis], pads[rank + axis] = s, -s
    pos = b.iota(shape=list(v.type.shape), axis=axis, dtype=DType.i64)
    return b.pad(v, pads=pads), b.ge(pos, b.full(s, v.type.shape, DType.i64))


class _NumPyLogic:
    """The comparisons and logic `_later_wins` uses, in NumPy (for the reference)."""

    ne, ge, le = np.not_equal, np.greater_equal, np.less_equal
    or_, and_, not_ = np.logical_or, np.logical_and, np.logical_not


class _IRLogic:
    """The same as IR ops (the IR's `or`, `and`, `not` spelt with a trailing underscore here)."""

    def __init__(self, b):
        self.b = b

    def __getattr__(self, name):
        return lambda *xs: self.b.emit(name.rstrip("_"), *xs)


def _later_wins(lib, name, later, earlier):
    """Whether the later value replaces the running one: a NaN always, then a better or equal one (ties go to the
    later index, as PyTorch's)."""
    better = lib.ge(later, earlier) if name == "cummax" else lib.le(later, earlier)
    return lib.or_(lib.ne(later, later), lib.and_(lib.not_(lib.ne(earlier, earlier)), better))


def _ref_cum_extreme(name):
    def ref(xs, a):
        x = np.moveaxis(xs[0], a["axis"], 0)
        values, indices = np.empty_like(x), np.zeros(x.shape, np.int64)
        for i in range(x.shape[0]):
            if i == 0:
                v, k = x[0], np.zeros(x.shape[1:], np.int64)
            take = _later_wins(_NumPyLogic, name, x[i], v)
            v, k = np.where(take, x[i], v), np.where(take, i, k)
            values[i], indices[i] = v, k
        return [np.moveaxis(values, 0, a["axis"]), np.moveaxis(indices, 0, a["axis"])]
    return ref


def _dec_cum_extreme(name):
    def decompose(b, ops, a):
        v, axis, lib = ops[0], a["axis"], _IRLogic(b)
        k = b.iota(shape=list(v.type.shape), axis=axis, dtype=DType.i64)
        for s in _scan_steps(name, v, axis):
            (pv, real), (pk, _) = _shifted(b, v, axis, s), _shifted(b, k, axis, s)
            earlier = lib.and_(real, lib.not_(_later_wins(lib, name, v, pv)))
            v, k = b.where(earlier, pv, v), b.where(earlier, pk, k)
        return v, k
    return decompose


def _cum_extreme_shape(name):
    def shape(ctx, types, a):
        _axis_operand(ctx, types[0], name)
        return [types[0], types[0].with_dtype(DType.i64)]
    return shape


for _name in ("cummax", "cummin"):
    register_op(_name, results=2, shape=_cum_extreme_shape(_name), reference=_ref_cum_extreme(_name),
                decompose=_dec_cum_extreme(_name), normalize=_norm_axis(_name), attrs={"axis": Attr("int")},
                doc=f"running {_name[3:]} along axis and its index (the later one on ties; NaN propagates)")


def _ref_logcumsumexp(xs, a):
    with np.errstate(all="ignore"):
        return np.logaddexp.accumulate(xs[0].astype(np.float64), axis=a["axis"]).astype(xs[0].dtype)


def _dec_logcumsumexp(b, ops, a):
    """Pairs combined as hi + log1p(exp(lo - hi)), exact hi + log 2 where they are equal (infinities included)."""
    v, axis = ops[0], a["axis"]
    t = v.type
    for s in _scan_steps("logcumsumexp", v, axis):
        prev, real = _shifted(b, v, axis, s)
        hi, lo = b.max(prev, v), b.min(prev, v)
        pair = b.add(hi, b.log1p(b.exp(b.sub(lo, hi))))
        pair = b.where(b.eq(lo, hi), b.add(hi, b.full(math.log(2), t.shape, t.dtype)), pair)
        v = b.where(real, pair, v)
    return v


register_op("logcumsumexp", shape=_scan_shape("logcumsumexp"), reference=_ref_logcumsumexp,
            decompose=_dec_logcumsumexp, normalize=_norm_axis("logcumsumexp"), attrs={"axis": Attr("int")},
            doc="log of the running sum of exp along axis, without overflow")


def _topk_shape(ctx, types, a):
    t, k, axis = types[0], a["k"], a["axis"]
    _axis_operand(ctx, t, "topk")
    d = t.shape[axis]
    if k < 0 or (isinstance(d, int) and k > d):
        raise ctx.error(f"'topk' k={k} is out of range for axis {axis} of {t}")
    shape = t.shape[:axis] + (k,) + t.shape[axis + 1:]
    return [t.with_shape(shape), TensorType(DType.i64, shape)]


def _ref_topk(xs, a):
    """Stable: among equal values the lower index comes first. Sorting the reversed axis ascending and
    reading it backwards gives descending order with that tie-break, without negating (which overflows)."""
    x, axis, k = xs[0], a["axis"], a["k"]
    n = x.shape[axis]
    if a["largest"]:
        order = n - 1 - np.flip(np.argsort(np.flip(x, axis), axis=axis, kind="stable"), axis)
    else:
        order = np.argsort(x, axis=axis, kind="stable")
    idx = np.take(order, np.arange(k), axis=axis).astype(np.int64)
    return [np.take_along_axis(x, idx, axis=axis), idx]


register_op("topk", results=2, shape=_topk_shape, reference=_ref_topk, normalize=_norm_axis("topk"),
            attrs={"k": Attr("int"), "axis": Attr("int", -1), "largest": Attr("bool", True),
                   "sorted": Attr("bool", True)},
            doc="the k largest (or smallest) values along axis and their i64 indices; results are always sorted")
