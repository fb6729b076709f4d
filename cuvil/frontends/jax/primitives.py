"""jaxpr primitives for elementwise math, comparisons, selection, casts, shapes and reductions.

JAX types are explicit, so operands already have the result's dtype; only rank-0 literals need
broadcasting to the result's shape.
"""
from __future__ import annotations

import math

from ...ir.dtypes import DType
from .context import primitive, to_dim

_UNARY = {"neg": "neg", "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt", "tanh": "tanh",
          "logistic": "sigmoid", "sin": "sin", "cos": "cos", "tan": "tan", "abs": "abs", "sign": "sign",
          "floor": "floor", "ceil": "ceil", "erf": "erf"}
_BINARY = {"add": "add", "add_any": "add", "sub": "sub", "mul": "mul", "div": "div", "max": "max", "min": "min",
           "pow": "pow", "and": "and", "or": "or", "xor": "xor"}
_COMPARE = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}
_REDUCE = {"reduce_sum": "reduce_sum", "reduce_max": "reduce_max", "reduce_min": "reduce_min",
           "reduce_prod": "reduce_prod"}
_IDENTITY = ("stop_gradient", "copy", "copy_p", "optimization_barrier", "sharding_constraint")
# reduce_precision (exponent_bits, mantissa_bits) -> the IR type that rounds the same way
_PRECISIONS = {(5, 10): DType.f16, (8, 7): DType.bf16, (8, 23): DType.f32, (11, 52): DType.f64}


def _unary(op):
    def convert(cx, x, **params):
        return cx.b.emit(op, x)
    return convert


def _binary(op):
    def convert(cx, x, y, **params):
        if op in ("and", "or", "xor") and x.type.dtype is not DType.bool:
            raise cx.error("bitwise ops on integers are not supported (only on bools)")
        return cx.b.emit(op, *cx.operands([x, y]))
    return convert


def _compare(op):
    def convert(cx, x, y, **params):
        return cx.b.emit(op, *cx.operands([x, y], shape=cx.out_type().shape))
    return convert


def _reduce(op):
    def convert(cx, x, axes, **params):
        return cx.b.emit(op, x, axes=axes, keepdims=False) if axes else x
    return convert


def _identity(cx, *xs, **params):
    return list(xs) if len(xs) > 1 else xs[0]


for _table, _make in ((_UNARY, _unary), (_BINARY, _binary), (_COMPARE, _compare), (_REDUCE, _reduce)):
    for _name, _op in _table.items():
        primitive(_name)(_make(_op))
primitive(*_IDENTITY)(_identity)


@primitive("rem")
def rem(cx, x, y):
    return cx.b.mod(*cx.operands([x, y]), fmod=True)  # C remainder: the sign of the dividend


@primitive("not")
def not_(cx, x):
    if x.type.dtype is DType.bool:
        return cx.b.emit("not", x)
    return cx.b.sub(cx.b.neg(x), cx.tensor(1, x.type.dtype, x.type.shape))  # ~x == -x - 1


@primitive("round")
def round_(cx, x, rounding_method=0):
    if int(rounding_method) == 1:  # to nearest even
        return cx.b.round(x)
    half = cx.tensor(0.5, x.type.dtype, x.type.shape)  # away from zero
    return cx.b.mul(cx.b.sign(x), cx.b.floor(cx.b.add(cx.b.abs(x), half)))


@primitive("is_finite")
def is_finite(cx, x):
    return cx.b.emit("not", cx.b.emit("or", cx.b.isnan(x), cx.b.isinf(x)))


@primitive("integer_pow")
def integer_pow(cx, x, y):
    """x**y by repeated squaring, as XLA expands it; negative powers take the reciprocal."""
    if y == 0:
        return cx.tensor(1, x.type.dtype, x.type.shape)
    out, base, n = None, x, abs(y)
    while n:
        if n & 1:
            out = base if out is None else cx.b.mul(out, base)
        n >>= 1
        if n:
            base = cx.b.mul(base, base)
    return cx.b.reciprocal(out) if y < 0 else out


@primitive("square")
def square(cx, x):
    return cx.b.mul(x, x)


@primitive("exp2", "log1p", "expm1", "cbrt", "erfc")
def exp_family(cx, x, **params):
    t, name = x.type, cx.eqn.primitive.name
    one = cx.tensor(1, t.dtype, t.shape)
    if name == "exp2":
        return cx.b.exp(cx.b.mul(x, cx.tensor(math.log(2), t.dtype, t.shape)))
    if name == "log1p":
        return cx.b.log(cx.b.add(x, one))
    if name == "expm1":
        return cx.b.sub(cx.b.exp(x), one)
    if name == "erfc":
        return cx.b.sub(one, cx.b.erf(x))
    third = cx.b.pow(cx.b.abs(x), cx.tensor(1 / 3, t.dtype, t.shape))
    return cx.b.mul(cx.b.sign(x), third)


@primitive("select_n")
def select_n(cx, which, *cases):
    """cases[which]: a bool picks between two; an integer index chains `where`s."""
    shape = cx.out_type().shape
    cases = cx.operands(list(cases), shape=shape)
    which = cx.tensor(which, which.type.dtype, shape)
    if which.type.dtype is DType.bool:
        return cx.b.where(which, cases[1], cases[0])
    out = cases[0]
    for i, case in enumerate(cases[1:], start=1):
        out = cx.b.where(cx.b.eq(which, cx.tensor(i, which.type.dtype, shape)), case, out)
    return out


@primitive("clamp")
def clamp(cx, lo, x, hi):
    lo, x, hi = cx.operands([lo, x, hi], dtype=x.type.dtype)
    return cx.b.min(cx.b.max(x, lo), hi)


@primitive("reduce_precision")
def reduce_precision(cx, x, exponent_bits, mantissa_bits):
    narrow = _PRECISIONS.get((exponent_bits, mantissa_bits))
    if narrow is None:
        raise cx.error(f"rounding to {exponent_bits} exponent and {mantissa_bits} mantissa bits is not supported")
    return x if narrow is x.type.dtype else cx.b.cast(cx.b.cast(x, dtype=narrow), dtype=x.type.dtype)


@primitive("convert_element_type")
def convert_element_type(cx, x, new_dtype, **params):
    dtype = DType.from_numpy(new_dtype)
    return x if x.type.dtype is dtype else cx.b.cast(x, dtype=dtype)


# -- shapes ----------------------------------------------------------------------------------------------
@primitive("broadcast_in_dim")
def broadcast_in_dim(cx, x, shape, broadcast_dimensions, **params):
    out = cx.out_type().shape
    spread = [1] * len(out)
    for src, dst in enumerate(broadcast_dimensions):
        spread[dst] = x.type.shape[src]
    if tuple(spread) != x.type.shape:
        x = cx.b.reshape(x, shape=spread)
    return x if x.type.shape == out else cx.b.broadcast_to(x, shape=out)


@primitive("reshape", "squeeze", "expand_dims")
def reshape(cx, x, dimensions=None, **params):
    if dimensions is not None and cx.eqn.primitive.name == "reshape":
        x = cx.b.transpose(x, perm=list(dimensions))  # reshape in the given axis order
    out = cx.out_type().shape
    return x if x.type.shape == out else cx.b.reshape(x, shape=out)


@primitive("transpose")
def transpose(cx, x, permutation):
    return cx.b.transpose(x, perm=list(permutation))


@primitive("concatenate")
def concatenate(cx, *xs, dimension):
    return cx.b.concat(*xs, axis=dimension) if len(xs) > 1 else xs[0]


@primitive("stack")
def stack(cx, *xs, axis):
    parts = [cx.b.reshape(x, shape=x.type.shape[:axis] + (1,) + x.type.shape[axis:]) for x in xs]
    return cx.b.concat(*parts, axis=axis) if len(parts) > 1 else parts[0]


@primitive("tile")
def tile(cx, x, reps):
    return cx.b.tile(x, repeats=list(reps))


@primitive("split")
def split(cx, x, sizes, axis):
    out = cx.b.split(x, axis=axis, sizes=[cx.out_type(i).shape[axis] for i in range(len(sizes))])
    return list(out) if isinstance(out, tuple) else [out]


@primitive("slice")
def slice_(cx, x, start_indices, limit_indices, strides=None):
    n = len(start_indices)
    return cx.b.slice(x, starts=[to_dim(d) for d in start_indices], ends=[to_dim(d) for d in limit_indices],
                      axes=list(range(n)),
                      steps=list(strides or (1,) * n))


@primitive("rev")
def rev(cx, x, dimensions):
    axes = sorted(dimensions)
    big = 2 ** 31 - 1
    return cx.b.slice(x, starts=[-1] * len(axes), ends=[-big] * len(axes), axes=axes, steps=[-1] * len(axes))


@primitive("pad")
def pad(cx, x, value, padding_config):
    if any(interior for _, _, interior in padding_config):
        raise cx.error("interior (dilating) padding is not supported")
    fill = cx.walker.static_value(value)
    if fill is None:
        raise cx.error("the padding value must be a constant")
    pads = [lo for lo, _, _ in padding_config] + [hi for _, hi, _ in padding_config]
    return cx.b.pad(x, pads=pads, value=float(fill))


@primitive("iota")
def iota(cx, dtype, shape, dimension, **params):
    t = cx.out_type()
    return cx.b.iota(shape=t.shape, axis=dimension, dtype=t.dtype)


@primitive("dim_as_value")
def dim_as_value(cx, dim):
    return cx.b.dim_size(dim=[to_dim(dim)], dtype=cx.out_type().dtype)


# -- reductions ------------------------------------------------------------------------------------------
@primitive("reduce_and", "reduce_or")
def reduce_logic(cx, x, axes, **params):
    as_int = cx.b.cast(x, dtype=DType.u8)
    op = "reduce_min" if cx.eqn.primitive.name == "reduce_and" else "reduce_max"
    return cx.b.cast(cx.b.emit(op, as_int, axes=axes, keepdims=False), dtype=DType.bool)


@primitive("argmax", "argmin")
def argmax(cx, x, axes, index_dtype):
    idx = cx.b.emit(cx.eqn.primitive.name, x, axis=axes[0], keepdims=False)
    return cx.tensor(idx, DType.from_numpy(index_dtype))


@primitive("cumsum", "cumprod")
def cumsum(cx, x, axis, reverse=False):
    return cx.b.emit(cx.eqn.primitive.name, x, axis=axis, reverse=bool(reverse))
