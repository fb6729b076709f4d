"""Building blocks the converters share: make tensors of Python values, broadcast and promote explicitly,
and emit elementwise ops, reductions, reshapes and matmul with the framework's own typing rules.

Converters raise `UnsupportedError` / `ShapeError` without a location; the translator adds the quoted
source line of the expression being translated.
"""
from __future__ import annotations

import math
from contextlib import contextmanager

import numpy as np

from ...errors import ShapeError, UnsupportedError
from ...ir.core import UNKNOWN_LOC
from ...ir.dtypes import DType
from ...ir.symbolic import SymExpr
from ...ops.common import broadcast_shapes
from .values import TV, StackedList, common_dtype, dtype_of_array, is_weak, result_dtype, weak_kind

COMPARISONS = frozenset({"eq", "ne", "lt", "le", "gt", "ge"})
LOGICAL = frozenset({"and", "or", "xor"})
_ON_BOOL = {"add": "or", "mul": "and", "max": "or", "min": "and"}  # what NumPy and torch do on bools


class Context:
    """Per-compilation state: the module, the builder of the region being filled, the framework mode."""

    def __init__(self, module, builder, mode: str, options: dict):
        self.module, self.mode, self.options = module, mode, options
        self._b = builder
        self.loc = UNKNOWN_LOC
        self._constants: dict = {}  # id(array) -> constant name, so one array is stored once
        self.nesting = 0  # regions (branches, loop bodies) being translated inside the function's own
        self.views: dict = {}  # id(tensor) -> (tensor, the tensor it is a basic-indexing view of)

    @property
    def b(self):
        return self._b

    @contextmanager
    def building(self, builder):
        """Translate into another region for a while (a branch, a loop body)."""
        outer, self._b = self._b, builder
        builder.loc = self.loc
        self.nesting += 1
        try:
            yield builder
        finally:
            self._b = outer
            outer.loc = self.loc
            self.nesting -= 1

    def at(self, loc) -> None:
        self.loc = loc
        self._b.loc = loc

    def constant(self, arr: np.ndarray) -> TV:
        """A module constant for `arr` (not copied; stored once however often it is used)."""
        dtype_of_array(arr.dtype)
        name = self._constants.get(id(arr))
        if name is None or self.module.constants.get(name) is not arr:
            name = self._constants[id(arr)] = self.module.add_constant(arr, "const")
        return TV(self._b.emit("constant", name=name))

    @property
    def default_float(self) -> DType:
        return DType.f32 if self.mode == "torch" else DType.f64


# -- making tensors -----------------------------------------------------------------------------------------
def shape_of(v) -> tuple:
    return v.shape if isinstance(v, TV) else ()


def tensor(cx: Context, v, dtype: DType = None, shape: tuple = None) -> TV:
    """`v` as a tensor of `dtype` broadcast to `shape` (each when given). Python numbers become weak tensors."""
    if isinstance(v, TV):
        t = v
    elif isinstance(v, (bool, int, float)) and not isinstance(v, np.generic):
        d = dtype or weak_kind(v)
        return TV(cx.b.full(float(v), shape or (), d), weak=True)
    elif isinstance(v, SymExpr):
        t = TV(cx.b.dim_size(dim=[v]), weak=True)
    elif isinstance(v, (np.ndarray, np.generic)):
        t = cx.constant(v if isinstance(v, np.ndarray) else np.asarray(v))
    else:
        raise UnsupportedError(f"a {type(v).__name__} cannot be used as a tensor here")
    return to(cx, t, dtype, shape)


def to(cx: Context, t: TV, dtype: DType = None, shape: tuple = None) -> TV:
    """Cast and broadcast explicitly (the IR never does either implicitly)."""
    v = t.value
    if dtype is not None and dtype != t.dtype:
        v = cx.b.cast(v, dtype=dtype)
    if shape is not None and tuple(shape) != t.shape:
        v = cx.b.broadcast_to(v, shape=tuple(shape))
    return t if v is t.value else TV(v, t.weak)


def _fmt(shape) -> str:
    return "[" + ",".join(map(str, shape)) + "]"


# -- elementwise ---------------------------------------------------------------------------------------------
def combine(cx: Context, irop: str, operands, dtype: DType, **attrs) -> TV:
    """Emit `irop` on operands brought to one dtype and the broadcast shape."""
    shape = broadcast_shapes(*(shape_of(v) for v in operands))
    vals = [tensor(cx, v, dtype, shape).value for v in operands]
    weak = all(is_weak(v) for v in operands)
    return TV(cx.b.emit(irop, *vals, **attrs), weak)


def binary(cx: Context, irop: str, fname: str, a, b) -> TV:
    """`a <op> b` typed as `<framework>.<fname>(a, b)` would be."""
    if irop in COMPARISONS:
        return combine(cx, irop, [a, b], common_dtype(cx.mode, a, b))
    if irop in LOGICAL:
        return combine(cx, irop, [a, b], DType.bool)
    dtype = result_dtype(cx.mode, fname, a, b)
    if dtype is DType.bool:
        if irop not in _ON_BOOL:
            raise UnsupportedError(f"'{fname}' on booleans is not supported (cast to an integer type first)")
        irop = _ON_BOOL[irop]
    return combine(cx, irop, [a, b], dtype)


_BITWISE_NUMPY = {"bitwise_and": "bitwise_and", "bitwise_or": "bitwise_or", "bitwise_xor": "bitwise_xor",
                  "shift_left": "left_shift", "shift_right": "right_shift"}
_BITWISE_ON_BOOL = {"bitwise_and": "and", "bitwise_or": "or", "bitwise_xor": "xor"}


def bitwise(cx: Context, irop: str, a, b) -> TV:
    """`a & b`, `a << b` ... typed as the framework types them; on booleans the logical op."""
    dtype = result_dtype(cx.mode, _BITWISE_NUMPY[irop], a, b)
    if dtype.is_float:
        raise UnsupportedError(f"'{irop}' needs integer or boolean operands, got {dtype}")
    return combine(cx, _BITWISE_ON_BOOL[irop] if dtype is DType.bool else irop, [a, b], dtype)


def invert(cx: Context, x) -> TV:
    """`~x`: logical not of booleans, every bit flipped for integers."""
    t = tensor(cx, x)
    if t.dtype is DType.bool:
        return logical_not(cx, t)
    if t.dtype.is_float:
        raise UnsupportedError(f"~ needs an integer or boolean tensor, got {t.dtype}")
    return TV(cx.b.bitwise_not(t.value), t.weak)


def float_result(cx: Context, fname, x) -> DType:
    """Result dtype of a float function: the framework's answer, or the input's float type."""
    if fname is not None:
        return result_dtype(cx.mode, fname, x)
    d = x.dtype if isinstance(x, TV) else weak_kind(x)
    return d if d.is_float else cx.default_float


def unary(cx: Context, irop: str, fname, x, **attrs) -> TV:
    """A float-or-numeric unary op: cast to the framework's result dtype first (np.exp(int) is f64)."""
    dtype = float_result(cx, fname, x)
    t = tensor(cx, x, dtype)
    return TV(cx.b.emit(irop, t.value, **attrs), t.weak)


def predicate(cx: Context, irop: str, x) -> TV:
    """isnan / isinf: false for integers, as NumPy and torch say."""
    t = tensor(cx, x)
    if not t.dtype.is_float:
        return TV(cx.b.full(0.0, t.shape, DType.bool))
    return TV(cx.b.emit(irop, t.value))


def logical_not(cx: Context, x) -> TV:
    t = tensor(cx, x)
    return TV(cx.b.emit("not", to(cx, t, DType.bool).value), t.weak)


def where(cx: Context, c, a, b) -> TV:
    dtype = common_dtype(cx.mode, a, b)
    shape = broadcast_shapes(shape_of(c), shape_of(a), shape_of(b))
    cond = tensor(cx, c, DType.bool, shape)
    return TV(cx.b.where(cond.value, tensor(cx, a, dtype, shape).value, tensor(cx, b, dtype, shape).value),
              is_weak(a) and is_weak(b))


def truth(cx: Context, v):
    """`if v:` — a Python bool for Python values, else a bool scalar tensor (the predicate of a `cond`)."""
    if not isinstance(v, (TV, SymExpr)):
        return bool(v)
    t = tensor(cx, v)
    if t.rank:
        if not (isinstance(t.type.numel, int) and t.type.numel == 1):
            raise UnsupportedError(f"the truth value of a tensor of shape {_fmt(t.shape)} is ambiguous; reduce it "
                                   "with .any() or .all() (or compare a scalar such as x.mean())")
        t = TV(cx.b.reshape(t.value, shape=()), t.weak)
    if t.dtype is not DType.bool:
        t = TV(cx.b.ne(t.value, cx.b.full(0.0, (), t.dtype)))
    return t


# -- reductions ------------------------------------------------------------------------------------------------
def axes_of(axis, rank: int):
    """Normalised axes: None means all; an int or a tuple of ints otherwise."""
    if axis is None:
        return tuple(range(rank))
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    for a in axes:
        if not isinstance(a, int) or isinstance(a, bool) or not -max(rank, 1) <= a < max(rank, 1):
            raise UnsupportedError(f"axis {a!r} is not a valid axis for a tensor of rank {rank}")
    return tuple(sorted({a % rank for a in axes})) if rank else ()


def reduce(cx: Context, irop: str, fname: str, x, axis=None, keepdims=False, dtype=None) -> TV:
    """A reduction typed as the framework types it (np.sum of int32 is int64, np.mean of ints is f64)."""
    t = tensor(cx, x)
    axes = axes_of(axis, t.rank)
    out = dtype or result_dtype(cx.mode, fname, t)
    t = to(cx, t, out)
    if not axes:
        return t
    if out is DType.bool:  # max/min of booleans: reduce as integers
        r = cx.b.emit(irop, cx.b.cast(t.value, dtype=DType.i32), axes=axes, keepdims=bool(keepdims))
        return TV(cx.b.cast(r, dtype=DType.bool))
    return TV(cx.b.emit(irop, t.value, axes=axes, keepdims=bool(keepdims)))


def any_all(cx: Context, irop: str, x, axis=None, keepdims=False) -> TV:
    """any = max of the truth values, all = min."""
    t = to(cx, tensor(cx, x), DType.bool)
    return reduce(cx, irop, "max", t, axis, keepdims, DType.bool)


def arg_reduce(cx: Context, irop: str, x, axis=None, keepdims=False) -> TV:
    t = tensor(cx, x)
    if axis is None:
        t, axis = TV(cx.b.reshape(t.value, shape=(-1,))), 0
    return TV(cx.b.emit(irop, t.value, axis=axis, keepdims=bool(keepdims)))


def variance(cx: Context, x, axis=None, keepdims=False, ddof=0, root=False) -> TV:
    """var = mean((x - mean(x))^2) * n / (n - ddof); std is its square root."""
    t = tensor(cx, x)
    t = to(cx, t, t.dtype if t.dtype.is_float else cx.default_float)
    axes = axes_of(axis, t.rank)
    mean = TV(cx.b.reduce_mean(t.value, axes=axes, keepdims=True))
    dev = binary(cx, "sub", "subtract", t, mean)
    sq = reduce(cx, "reduce_sum", "sum", binary(cx, "mul", "multiply", dev, dev), axes, keepdims)
    n = math.prod((t.shape[a] for a in axes), start=1)  # an int or a symbolic size
    out = binary(cx, "div", "true_divide", sq, n - ddof)
    return unary(cx, "sqrt", None, out) if root else out


# -- shapes ------------------------------------------------------------------------------------------------------
def static_sizes(values, what: str) -> tuple:
    """Sizes given by the program: ints or symbolic sizes, never run-time tensors."""
    out = []
    for v in values:
        if isinstance(v, TV):
            raise UnsupportedError(f"{what} must be known at compile time (ints or x.shape[i]), got a tensor")
        if isinstance(v, bool) or not isinstance(v, (int, SymExpr, np.integer)):
            raise UnsupportedError(f"{what} must be integers, got {v!r}")
        out.append(int(v) if isinstance(v, np.integer) else v)
    return tuple(out)


def shape_arg(args) -> tuple:
    """`reshape(2, 3)` and `reshape((2, 3))` alike."""
    if len(args) == 1 and isinstance(args[0], (tuple, list)):
        return tuple(args[0])
    return tuple(args)


def reshape(cx: Context, x, shape) -> TV:
    t = tensor(cx, x)
    return TV(cx.b.reshape(t.value, shape=static_sizes(shape, "reshape sizes")), t.weak)


def transpose(cx: Context, x, perm=None) -> TV:
    t = tensor(cx, x)
    return TV(cx.b.transpose(t.value, perm=tuple(perm) if perm is not None else ()), t.weak)


def swap(cx: Context, x, a: int, b: int) -> TV:
    t = tensor(cx, x)
    perm = list(range(t.rank))
    a, b = axes_of(a, t.rank)[0], axes_of(b, t.rank)[0]
    perm[a], perm[b] = perm[b], perm[a]
    return transpose(cx, t, perm)


def unsqueeze(cx: Context, x, axis: int) -> TV:
    t = tensor(cx, x)
    axis = axes_of(axis, t.rank + 1)[0]
    return reshape(cx, t, t.shape[:axis] + (1,) + t.shape[axis:])


def squeeze(cx: Context, x, axis=None, strict=True) -> TV:
    """Drop size-1 axes (all of them, or the given ones; torch ignores given axes that are not 1)."""
    t = tensor(cx, x)
    axes = [i for i, d in enumerate(t.shape) if d == 1] if axis is None else axes_of(axis, t.rank)
    bad = [a for a in axes if t.shape[a] != 1]
    if bad and strict:
        raise ShapeError(f"cannot squeeze axis {bad[0]} of size {t.shape[bad[0]]}")
    return reshape(cx, t, [d for i, d in enumerate(t.shape) if i not in axes or d != 1])


def flatten(cx: Context, x, start=0, end=-1) -> TV:
    t = tensor(cx, x)
    if t.rank == 0:
        return reshape(cx, t, (1,))
    s, e = axes_of(start, t.rank)[0], axes_of(end, t.rank)[0]
    return reshape(cx, t, t.shape[:s] + (math.prod(t.shape[s:e + 1], start=1),) + t.shape[e + 1:])


def cast(cx: Context, x, dtype: DType) -> TV:
    return to(cx, tensor(cx, x), dtype)


def concat(cx: Context, xs, axis=0) -> TV:
    if isinstance(xs, StackedList):  # the items joined along axis: their rows stacked, then merged into it
        t, is_rows = xs.parts[0]
        if t.rank - is_rows == 0:
            raise UnsupportedError("zero-dimensional arrays cannot be concatenated")
        if axis is None:
            return reshape(cx, stack(cx, xs, 0), (-1,))
        a = axes_of(axis, t.rank - is_rows)[0]
        return flatten(cx, stack(cx, xs, a), a, a + 1)
    xs = list(xs)
    if not xs or not all(isinstance(x, TV) for x in xs):
        raise UnsupportedError("concatenation needs a non-empty sequence of tensors")
    dtype = common_dtype(cx.mode, *xs)
    if axis is None:
        xs, axis = [reshape(cx, x, (-1,)) for x in xs], 0
    return TV(cx.b.concat(*[to(cx, x, dtype).value for x in xs], axis=axis))


def stack(cx: Context, xs, axis=0) -> TV:
    if isinstance(xs, StackedList):  # one tensor of the items along axis 0, moved to axis
        items = [t if rows else unsqueeze(cx, t, 0) for t, rows in xs.parts]
        dtype = common_dtype(cx.mode, *items)
        out = items[0] if len(items) == 1 else TV(cx.b.concat(*[to(cx, t, dtype).value for t in items], axis=0))
        a = axes_of(axis, out.rank)[0]
        return out if a == 0 else transpose(cx, out, [*range(1, a + 1), 0, *range(a + 1, out.rank)])
    xs = list(xs)
    if not xs or not all(isinstance(x, TV) for x in xs):
        raise UnsupportedError("stacking needs a non-empty sequence of tensors")
    return concat(cx, [unsqueeze(cx, x, axis) for x in xs], axis)


def matmul(cx: Context, a, b) -> TV:
    """NumPy matmul: vectors get a unit axis that is dropped again, batch dims broadcast."""
    a, b = tensor(cx, a), tensor(cx, b)
    if a.rank == 0 or b.rank == 0:
        raise UnsupportedError("matmul needs operands of rank >= 1 (use * for scalars)")
    dtype = common_dtype(cx.mode, a, b)
    a2 = reshape(cx, a, (1,) + a.shape) if a.rank == 1 else a
    b2 = reshape(cx, b, b.shape + (1,)) if b.rank == 1 else b
    if a2.rank > 2 and b2.rank > 2 and a2.shape[:-2] != b2.shape[:-2]:
        batch = broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
        a2, b2 = to(cx, a2, shape=batch + a2.shape[-2:]), to(cx, b2, shape=batch + b2.shape[-2:])
    out = TV(cx.b.matmul(to(cx, a2, dtype).value, to(cx, b2, dtype).value))
    shape = out.shape
    if a.rank == 1:
        shape = shape[:-2] + shape[-1:]
    if b.rank == 1:
        shape = shape[:-1]
    return reshape(cx, out, shape) if shape != out.shape else out
