"""The supported NumPy functions and ndarray methods, as a table of converters; the lookup for every table.

A converter has the framework function's own signature with the context first, so Python binds the
arguments (keywords, defaults) exactly as the original would; an argument it does not take is an error.
Calls whose arguments are all compile-time values run at compile time (`np.arange(4)` is a constant).
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import UnsupportedError
from ...ir.dtypes import DType
from . import calls_more as M
from . import emit as E
from .emit import Context, tensor
from .values import TV, StackedList, result_dtype, to_dtype, user_dtype, weak_kind


# -- converter factories shared with the torch tables ----------------------------------------------------------
def unary(irop: str, fname=None):
    def conv(cx, x):
        return E.unary(cx, irop, fname, x)
    return conv


def unary_any(irop: str, fname: str):
    """Ops defined on integers too (abs, neg, relu, sign; floor/ceil/round are identities on integers)."""
    def conv(cx, x):
        dtype = result_dtype(cx.mode, fname, x)
        t = tensor(cx, x, dtype)
        if not dtype.is_float and irop in ("floor", "ceil", "round"):
            return t
        return TV(cx.b.emit(irop, t.value), t.weak)
    return conv


def binary(irop: str, fname: str):
    def conv(cx, a, b):
        return E.binary(cx, irop, fname, a, b)
    return conv


def predicate(irop: str):
    return lambda cx, x: E.predicate(cx, irop, x)


def square(cx, x):
    return E.binary(cx, "mul", "multiply", x, x)


def clip(cx, fname: str, x, lo, hi) -> TV:
    """Python bounds become the `clip` op's attributes; tensor bounds become max/min."""
    dtype = result_dtype(cx.mode, fname, x, lo, hi)
    t = tensor(cx, x, dtype)
    if all(isinstance(v, (int, float, type(None))) for v in (lo, hi)):
        return TV(cx.b.clip(t.value, min=-math.inf if lo is None else lo, max=math.inf if hi is None else hi), t.weak)
    if lo is not None:
        t = E.binary(cx, "max", "maximum", t, lo)
    return t if hi is None else E.binary(cx, "min", "minimum", t, hi)


def dtype_arg(d, what="dtype"):
    out = to_dtype(d)
    if out is None:
        raise UnsupportedError(f"{what} {d!r} is not a dtype this compiler knows")
    return out


def full_of(cx: Context, shape, value, dtype, default: DType) -> TV:
    """zeros/ones/full with sizes only known symbolically (otherwise they run at compile time)."""
    shape = E.static_sizes(shape if isinstance(shape, (tuple, list)) else (shape,), "sizes")
    if dtype is None:
        kind = weak_kind(value)
        dtype = default if kind is DType.f64 else kind
    return TV(cx.b.full(float(value), shape, dtype_arg(dtype)))


def like(value):
    """zeros_like / ones_like / full_like."""
    def conv(cx, x, *args, dtype=None, **kw):
        fill = args[0] if value is None else value
        t = tensor(cx, x)
        d = dtype_arg(dtype) if dtype is not None else t.dtype
        return TV(cx.b.full(float(fill), t.shape, d))
    return conv


def triangle(lower: bool):
    """tril / triu: keep the elements on one side of the k-th diagonal (an iota comparison, no constants)."""
    def conv(cx, x, k=0):
        t = tensor(cx, x)
        if t.rank < 2:
            raise UnsupportedError("tril/triu need a tensor of rank >= 2")
        shape = t.shape[-2:]
        rows = TV(cx.b.iota(shape=shape, axis=0), weak=True)
        cols = TV(cx.b.iota(shape=shape, axis=1), weak=True)
        offset = E.binary(cx, "sub", "subtract", cols, rows)
        keep = E.binary(cx, "le" if lower else "ge", None, offset, k)
        return E.where(cx, keep, t, E.tensor(cx, 0, t.dtype))
    return conv


def take(cx, x, idx, axis=None):
    t = tensor(cx, x)
    if axis is None:
        t, axis = E.reshape(cx, t, (-1,)), 0
    i = idx if isinstance(idx, TV) else tensor(cx, np.asarray(idx, np.int64))
    return TV(cx.b.gather(t.value, E.to(cx, i, DType.i64).value, axis=axis))


def einsum(cx, equation, *operands):
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    ts = [tensor(cx, x) for x in operands]
    dtype = E.common_dtype(cx.mode, *ts)
    return TV(cx.b.einsum(*[E.to(cx, t, dtype).value for t in ts], equation=equation.replace(" ", "")))


def split(cx, x, sizes, axis) -> tuple:
    t = tensor(cx, x)
    axis = E.axes_of(axis, t.rank)[0]
    return tuple(TV(v) for v in _as_tuple(cx.b.split(t.value, axis=axis, sizes=tuple(sizes))))


def _as_tuple(v):
    return v if isinstance(v, tuple) else (v,)


def copy(cx, x) -> TV:
    """A new array: the same values under a new identity, so assigning into it changes nothing else."""
    t = tensor(cx, x)
    return TV(t.value, t.weak)


def np_array(copied: bool):
    """np.array / np.asarray of tensors: a sequence is stacked; np.asarray of a tensor is that tensor."""
    def conv(cx, a, dtype=None, **kw):
        if isinstance(a, StackedList):
            t = E.stack(cx, a, 0)
        elif isinstance(a, (list, tuple)):
            t = E.stack(cx, [tensor(cx, v) for v in a], 0)
        else:
            t = copy(cx, a) if copied else tensor(cx, a)
        return E.cast(cx, t, dtype_arg(dtype)) if dtype is not None else t
    return conv


# -- NumPy -----------------------------------------------------------------------------------------------------
def np_clip(cx, a, a_min=None, a_max=None):
    return clip(cx, "clip", a, a_min, a_max)


def np_reduce(irop: str, fname: str):
    def conv(cx, a, axis=None, dtype=None, keepdims=False):
        return E.reduce(cx, irop, fname, a, axis, keepdims, dtype_arg(dtype) if dtype is not None else None)
    return conv


def np_arg(irop: str):
    def conv(cx, a, axis=None, keepdims=False):
        return E.arg_reduce(cx, irop, a, axis, keepdims)
    return conv


def np_any_all(irop: str):
    def conv(cx, a, axis=None, keepdims=False):
        return E.any_all(cx, irop, a, axis, keepdims)
    return conv


def np_var(root: bool):
    def conv(cx, a, axis=None, dtype=None, ddof=0, keepdims=False):
        out = E.variance(cx, a, axis, keepdims, ddof, root)
        return E.cast(cx, out, dtype_arg(dtype)) if dtype is not None else out
    return conv


def np_cumsum(cx, a, axis=None, dtype=None):
    t = tensor(cx, a)
    if axis is None:
        t, axis = E.reshape(cx, t, (-1,)), 0
    d = dtype_arg(dtype) if dtype is not None else result_dtype(cx.mode, "sum", t)
    return TV(cx.b.cumsum(E.to(cx, t, d).value, axis=E.axes_of(axis, t.rank)[0]))


def np_round(cx, a, decimals=0):
    if decimals == 0:
        return unary_any("round", "round")(cx, a)
    scale = 10.0 ** decimals
    scaled = E.binary(cx, "mul", "multiply", a, scale)
    return E.binary(cx, "div", "true_divide", unary_any("round", "round")(cx, scaled), scale)


def np_split(cx, a, indices_or_sections, axis=0):
    t = tensor(cx, a)
    ax = E.axes_of(axis, t.rank)[0]
    n = t.shape[ax]
    if isinstance(indices_or_sections, int):
        k = indices_or_sections
        if isinstance(n, int) and n % k:
            raise UnsupportedError(f"np.split into {k} equal parts needs a size divisible by {k}, got {n}")
        return list(split(cx, t, [n // k] * k, ax))  # a symbolic n: the split records k * (n // k) == n
    bounds = [0, *indices_or_sections, n]
    return list(split(cx, t, [max(e - s, 0) for s, e in zip(bounds, bounds[1:])], ax))


def np_zeros(value):
    def conv(cx, shape, dtype=float):
        return full_of(cx, shape, value, dtype, DType.f64)
    return conv


def np_full(cx, shape, fill_value, dtype=None):
    return full_of(cx, shape, fill_value, dtype, DType.f64)


NUMPY_FUNCS = {
    **{n: unary(op, n) for n, op in [("exp", "exp"), ("log", "log"), ("sqrt", "sqrt"), ("tanh", "tanh"),
                                     ("sin", "sin"), ("cos", "cos"), ("tan", "tan"), ("arcsin", "asin"),
                                     ("arccos", "acos"), ("arctan", "atan"), ("sinh", "sinh"), ("cosh", "cosh"),
                                     ("arcsinh", "asinh"), ("arccosh", "acosh"), ("arctanh", "atanh"),
                                     ("log2", "log2"), ("log10", "log10"), ("log1p", "log1p"), ("expm1", "expm1"),
                                     ("exp2", "exp2")]},
    **{n: unary_any(op, n) for n, op in [("abs", "abs"), ("absolute", "abs"), ("negative", "neg"),
                                         ("sign", "sign"), ("floor", "floor"), ("ceil", "ceil")]},
    "reciprocal": unary("reciprocal", "reciprocal"), "square": square, "round": np_round, "around": np_round,
    **{n: binary(op, n) for n, op in [
        ("add", "add"), ("subtract", "sub"), ("multiply", "mul"), ("divide", "div"), ("true_divide", "div"),
        ("floor_divide", "floordiv"), ("mod", "mod"), ("remainder", "mod"), ("power", "pow"), ("maximum", "max"),
        ("minimum", "min"), ("equal", "eq"), ("not_equal", "ne"), ("less", "lt"), ("less_equal", "le"),
        ("greater", "gt"), ("greater_equal", "ge"), ("logical_and", "and"), ("logical_or", "or"),
        ("logical_xor", "xor")]},
    "logical_not": E.logical_not, "isnan": predicate("isnan"), "isinf": predicate("isinf"),
    "where": lambda cx, condition, x, y: E.where(cx, condition, x, y), "clip": np_clip,
    "matmul": E.matmul, "dot": E.matmul, "einsum": einsum,
    "concatenate": lambda cx, arrays, axis=0: E.concat(cx, arrays, axis),
    "stack": lambda cx, arrays, axis=0: E.stack(cx, arrays, axis),
    "sum": np_reduce("reduce_sum", "sum"), "mean": np_reduce("reduce_mean", "mean"),
    "max": np_reduce("reduce_max", "max"), "amax": np_reduce("reduce_max", "max"),
    "min": np_reduce("reduce_min", "min"), "amin": np_reduce("reduce_min", "min"),
    "prod": np_reduce("reduce_prod", "prod"), "argmax": np_arg("argmax"), "argmin": np_arg("argmin"),
    "any": np_any_all("reduce_max"), "all": np_any_all("reduce_min"), "var": np_var(False), "std": np_var(True),
    "cumsum": np_cumsum,
    "reshape": lambda cx, a, shape: E.reshape(cx, a, E.shape_arg((shape,))),
    "transpose": lambda cx, a, axes=None: E.transpose(cx, a, axes),
    "swapaxes": lambda cx, a, axis1, axis2: E.swap(cx, a, axis1, axis2),
    "expand_dims": lambda cx, a, axis: E.unsqueeze(cx, a, axis),
    "squeeze": lambda cx, a, axis=None: E.squeeze(cx, a, axis),
    "ravel": lambda cx, a: E.reshape(cx, a, (-1,)),
    "broadcast_to": lambda cx, array, shape: E.to(cx, tensor(cx, array), shape=E.static_sizes(
        E.shape_arg((shape,)), "sizes")),
    "tile": lambda cx, A, reps: tile(cx, A, reps if isinstance(reps, (tuple, list)) else (reps,)),
    "take": take, "split": np_split, "tril": triangle(True), "triu": triangle(False),
    "zeros": np_zeros(0.0), "ones": np_zeros(1.0), "full": np_full,
    "zeros_like": like(0.0), "ones_like": like(1.0), "full_like": like(None),
    "astype": lambda cx, x, dtype: E.cast(cx, x, dtype_arg(dtype)),
    "flip": M.flip, "fliplr": lambda cx, m: M.flip(cx, m, 1), "flipud": lambda cx, m: M.flip(cx, m, 0),
    "roll": M.roll, "moveaxis": M.moveaxis, "outer": M.outer, "trunc": M.trunc, "fix": M.trunc,
    "rint": unary_any("round", "rint"), "count_nonzero": M.count_nonzero, "diff": M.diff, "isclose": M.isclose,
    "pad": M.np_pad, "repeat": M.repeat, "copy": lambda cx, a, order="K": copy(cx, a),
    "array": np_array(True), "asarray": np_array(False),
    **{n: lambda cx, x1, x2, op=op: E.bitwise(cx, op, x1, x2) for n, op in [
        ("bitwise_and", "bitwise_and"), ("bitwise_or", "bitwise_or"), ("bitwise_xor", "bitwise_xor"),
        ("left_shift", "shift_left"), ("right_shift", "shift_right"), ("bitwise_left_shift", "shift_left"),
        ("bitwise_right_shift", "shift_right")]},
    "sort": M.np_sort, "argsort": M.np_argsort, "unique": M.np_unique,
    "cumprod": lambda cx, a, axis=None, dtype=None: M.cumprod(cx, a, axis, dtype_arg(dtype) if dtype else None),
    "nonzero": M.np_nonzero, "argwhere": M.argwhere, "flatnonzero": M.flatnonzero,
    "invert": lambda cx, x: E.invert(cx, x), "bitwise_not": lambda cx, x: E.invert(cx, x),
    "bitwise_invert": lambda cx, x: E.invert(cx, x),
}
NUMPY_FOLD_ONLY = ("array", "asarray", "arange", "eye", "linspace")


def tile(cx, x, reps) -> TV:
    t = tensor(cx, x)
    reps = E.static_sizes(reps, "repeats")
    if len(reps) > t.rank:
        t = E.reshape(cx, t, (1,) * (len(reps) - t.rank) + t.shape)
    reps = (1,) * (t.rank - len(reps)) + tuple(reps)
    return TV(cx.b.tile(t.value, repeats=reps))


def _np_sum_like(irop, fname):
    def conv(cx, x, axis=None, dtype=None, out=None, keepdims=False):
        if out is not None:
            raise UnsupportedError("out= is not supported (tensors are immutable); use the result")
        return np_reduce(irop, fname)(cx, x, axis, dtype, keepdims)
    return conv


NUMPY_METHODS = {
    "reshape": lambda cx, x, *shape, order="C": E.reshape(cx, x, E.shape_arg(shape)),
    "transpose": lambda cx, x, *axes: E.transpose(cx, x, E.shape_arg(axes) or None),
    "astype": lambda cx, x, dtype: E.cast(cx, x, dtype_arg(dtype)),
    "sum": _np_sum_like("reduce_sum", "sum"), "mean": _np_sum_like("reduce_mean", "mean"),
    "prod": _np_sum_like("reduce_prod", "prod"),
    "max": lambda cx, x, axis=None, keepdims=False: E.reduce(cx, "reduce_max", "max", x, axis, keepdims),
    "min": lambda cx, x, axis=None, keepdims=False: E.reduce(cx, "reduce_min", "min", x, axis, keepdims),
    "argmax": np_arg("argmax"), "argmin": np_arg("argmin"), "any": np_any_all("reduce_max"),
    "all": np_any_all("reduce_min"), "var": np_var(False), "std": np_var(True), "cumsum": np_cumsum,
    "clip": lambda cx, x, min=None, max=None: np_clip(cx, x, min, max), "round": np_round, "dot": E.matmul,
    "repeat": M.repeat,
    "squeeze": lambda cx, x, axis=None: E.squeeze(cx, x, axis),
    "flatten": lambda cx, x: E.reshape(cx, x, (-1,)), "ravel": lambda cx, x: E.reshape(cx, x, (-1,)),
    "swapaxes": lambda cx, x, a, b: E.swap(cx, x, a, b), "copy": lambda cx, x, order="C": copy(cx, x),
    "item": lambda cx, x: item(cx, x), "argsort": M.np_argsort,
    "cumprod": lambda cx, x, axis=None, dtype=None: M.cumprod(cx, x, axis, dtype_arg(dtype) if dtype else None),
    "sort": M.in_place("x.sort()", "x = np.sort(x)"),
    "nonzero": M.np_nonzero,
}


def item(cx, x) -> TV:
    """`x.item()` is a Python number in the original: a weak scalar here."""
    t = tensor(cx, x)
    if t.rank:
        t = E.reshape(cx, t, ())
    return TV(t.value, weak=True)


NUMPY_ATTRS = {
    "T": lambda cx, x: E.transpose(cx, x),
    "shape": lambda cx, x: tuple(x.shape),
    "ndim": lambda cx, x: x.rank,
    "size": lambda cx, x: x.type.numel,
    "dtype": lambda cx, x: user_dtype(x.dtype, "numpy"),
}
