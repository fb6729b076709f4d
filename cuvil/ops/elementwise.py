"""Elementwise ops: unary math, binary arithmetic and logic, comparisons, `where`, `cast`.

Operands of a binary op have equal shapes and one element type (frontends insert `broadcast_to` and
`cast`). Float references compute in float64 and round once to the result type, so they are the most
accurate oracle a backend can be held to.
"""
from __future__ import annotations

import math

import numpy as np

from ..ir.dtypes import DType
from .common import COMPLEX, require_dtype, unify_dtypes, unify_shapes
from .registry import Attr, register_op

ELEMENTWISE = {"elementwise"}
_erf = np.frompyfunc(math.erf, 1, 1)


def erf64(x):
    return _erf(np.asarray(x, np.float64)).astype(np.float64)


def _in_f64(fn):
    """Compute a float op in float64 and round to the input's type."""
    def ref(xs, attrs):
        x = xs[0]
        with np.errstate(all="ignore"):
            return np.asarray(fn(x.astype(np.float64), attrs)).astype(x.dtype)
    return ref


def _unary_shape(accepts, result_dtype=None):
    def shape(ctx, types, attrs):
        t = types[0]
        if not accepts(t.dtype):
            raise ctx.error(f"operand of element type {t.dtype} is not accepted here")
        return [t.with_dtype(result_dtype) if result_dtype else t]
    return shape


def is_float(d):
    return d.is_float


def is_numeric(d):
    return d is not DType.bool


def is_integral(d):
    return d.is_int or d is DType.bool


def _full_like(b, x, value):
    return b.full(value, x.type.shape, x.type.dtype)


def unary(name, fn, accepts=is_float, decompose=None, attrs=None, doc="", exact=False, traits=()):
    """Declare a unary elementwise op; `fn(x64, attrs)` is its float64 reference (exact ops run in-type)."""
    ref = (lambda xs, a: np.asarray(fn(xs[0], a))) if exact else _in_f64(fn)
    register_op(name, shape=_unary_shape(accepts), reference=ref, decompose=decompose, attrs=attrs,
                traits=ELEMENTWISE | set(traits), doc=doc)


# -- unary primitives ------------------------------------------------------------------------------------
unary("neg", lambda x, a: np.negative(x), is_numeric, exact=True, traits=COMPLEX)
unary("abs", lambda x, a: np.abs(x), is_numeric, exact=True)
unary("sign", lambda x, a: np.sign(x), is_numeric, exact=True)
unary("exp", lambda x, a: np.exp(x))
unary("log", lambda x, a: np.log(x))
unary("sqrt", lambda x, a: np.sqrt(x))
unary("rsqrt", lambda x, a: 1.0 / np.sqrt(x))
unary("reciprocal", lambda x, a: 1.0 / x)
unary("tanh", lambda x, a: np.tanh(x))
unary("sigmoid", lambda x, a: 1.0 / (1.0 + np.exp(-x)))
unary("relu", lambda x, a: np.maximum(x, 0).astype(x.dtype), is_numeric, exact=True)
unary("erf", lambda x, a: erf64(x))
unary("sin", lambda x, a: np.sin(x))
unary("cos", lambda x, a: np.cos(x))
unary("tan", lambda x, a: np.tan(x))
# inverse trigonometric and hyperbolic functions, and libm's accurate forms near 0 and 1
_erfc = np.frompyfunc(math.erfc, 1, 1)
for _name, _fn64 in {"asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh,
                     "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh, "expm1": np.expm1,
                     "log1p": np.log1p, "log2": np.log2, "log10": np.log10, "exp2": np.exp2, "trunc": np.trunc,
                     "erfc": lambda x: _erfc(x).astype(np.float64)}.items():
    unary(_name, lambda x, a, f=_fn64: f(x))
unary("floor", lambda x, a: np.floor(x))
unary("ceil", lambda x, a: np.ceil(x))
unary("round", lambda x, a: np.round(x), doc="round half to even, as ONNX and NumPy do")
register_op("not", shape=_unary_shape(lambda d: d is DType.bool), reference=lambda xs, a: np.logical_not(xs[0]),
            traits=ELEMENTWISE)
register_op("isnan", shape=_unary_shape(is_float, DType.bool), reference=lambda xs, a: np.isnan(xs[0]),
            traits=ELEMENTWISE)
register_op("isinf", shape=_unary_shape(is_float, DType.bool), reference=lambda xs, a: np.isinf(xs[0]),
            traits=ELEMENTWISE)


# -- unary composites: each has a decomposition into primitives ------------------------------------------
def _dec_leaky_relu(b, ops, a):
    x = ops[0]
    return b.where(b.lt(x, _full_like(b, x, 0)), b.mul(x, _full_like(b, x, a["alpha"])), x)


def _dec_elu(b, ops, a):
    x = ops[0]
    em1 = b.sub(b.exp(x), _full_like(b, x, 1))
    return b.where(b.lt(x, _full_like(b, x, 0)), b.mul(em1, _full_like(b, x, a["alpha"])), x)


def _dec_selu(b, ops, a):
    x = ops[0]
    em1 = b.mul(b.sub(b.exp(x), _full_like(b, x, 1)), _full_like(b, x, a["alpha"]))
    return b.mul(b.where(b.le(x, _full_like(b, x, 0)), em1, x), _full_like(b, x, a["gamma"]))


def _dec_gelu(b, ops, a):
    x = ops[0]
    half_x = b.mul(x, _full_like(b, x, 0.5))
    if a["approximate"] == "tanh":
        cube = b.mul(b.mul(x, x), x)
        inner = b.mul(b.add(x, b.mul(cube, _full_like(b, x, 0.044715))), _full_like(b, x, math.sqrt(2 / math.pi)))
        return b.mul(half_x, b.add(b.tanh(inner), _full_like(b, x, 1)))
    return b.mul(half_x, b.add(b.erf(b.mul(x, _full_like(b, x, 1 / math.sqrt(2)))), _full_like(b, x, 1)))


def _ref_gelu(x, a):
    if a["approximate"] == "tanh":
        return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + erf64(x / math.sqrt(2)))


def _dec_softplus(b, ops, a):
    x = ops[0]  # log(1 + exp(x)) written as max(x, 0) + log(1 + exp(-|x|)) so large x do not overflow
    tail = b.log(b.add(b.exp(b.neg(b.abs(x))), _full_like(b, x, 1)))
    return b.add(b.relu(x), tail)


def _dec_hardsigmoid(b, ops, a):
    x = ops[0]
    lin = b.add(b.mul(x, _full_like(b, x, a["alpha"])), _full_like(b, x, a["beta"]))
    return b.clip(lin, min=0.0, max=1.0)


def _dec_hardswish(b, ops, a):
    x = ops[0]
    return b.mul(x, b.hardsigmoid(x, alpha=1 / 6, beta=0.5))


def _dec_silu(b, ops, a):
    return b.mul(ops[0], b.sigmoid(ops[0]))


def _dec_clip(b, ops, a):
    x = ops[0]
    if a["min"] != -math.inf:
        x = b.max(x, _full_like(b, x, a["min"]))
    if a["max"] != math.inf:
        x = b.min(x, _full_like(b, x, a["max"]))
    return x


def _ref_clip(xs, a):
    x = xs[0]
    lo = -np.inf if a["min"] == -math.inf else np.asarray(a["min"]).astype(x.dtype)
    hi = np.inf if a["max"] == math.inf else np.asarray(a["max"]).astype(x.dtype)
    return np.clip(x, lo, hi).astype(x.dtype)


unary("leaky_relu", lambda x, a: np.where(x < 0, x * a["alpha"], x), attrs={"alpha": Attr("float", 0.01)},
      decompose=_dec_leaky_relu)
unary("elu", lambda x, a: np.where(x < 0, a["alpha"] * np.expm1(x), x), attrs={"alpha": Attr("float", 1.0)},
      decompose=_dec_elu)
unary("selu", lambda x, a: a["gamma"] * np.where(x <= 0, a["alpha"] * np.expm1(x), x),
      attrs={"alpha": Attr("float", 1.6732632423543772), "gamma": Attr("float", 1.0507009873554805)},
      decompose=_dec_selu)
unary("gelu", _ref_gelu, attrs={"approximate": Attr("str", "none", ("none", "tanh"))}, decompose=_dec_gelu)
unary("softplus", lambda x, a: np.logaddexp(x, 0), decompose=_dec_softplus)
unary("hardsigmoid", lambda x, a: np.clip(a["alpha"] * x + a["beta"], 0, 1), decompose=_dec_hardsigmoid,
      attrs={"alpha": Attr("float", 0.2), "beta": Attr("float", 0.5)})
unary("hardswish", lambda x, a: x * np.clip(x / 6 + 0.5, 0, 1), decompose=_dec_hardswish)
unary("silu", lambda x, a: x / (1.0 + np.exp(-x)), decompose=_dec_silu)
register_op("clip", shape=_unary_shape(is_numeric), reference=_ref_clip, decompose=_dec_clip, traits=ELEMENTWISE,
            attrs={"min": Attr("float", -math.inf), "max": Attr("float", math.inf)})


# -- binary ------------------------------------------------------------------------------------------------
def _binary_shape(accepts, result_dtype=None):
    def shape(ctx, types, attrs):
        dtype = unify_dtypes(ctx, types, "binary op")
        require_dtype(ctx, types[0], accepts, "binary op")
        return [types[0].with_shape(unify_shapes(ctx, types, "binary op")).with_dtype(result_dtype or dtype)]
    return shape


def _int_div(x, y):
    """C/ONNX integer division: truncate toward zero; division by zero gives 0 instead of a crash."""
    safe = np.where(y == 0, 1, y)
    q = np.abs(x) // np.abs(safe) * np.sign(x) * np.sign(safe)
    return np.where(y == 0, 0, q).astype(x.dtype)


def wide(dtype) -> type:
    """The type a float reference computes in: float64, or complex128 for complex operands."""
    return np.complex128 if np.dtype(dtype).kind == "c" else np.float64


def _ref_div(xs, a):
    x, y = xs
    if x.dtype.kind in "iu":
        return _int_div(x, y)
    with np.errstate(all="ignore"):
        return (x.astype(wide(x.dtype)) / y.astype(wide(x.dtype))).astype(x.dtype)


def _ref_mod(xs, a):
    x, y = xs
    with np.errstate(all="ignore"):
        if x.dtype.kind in "iu":
            safe = np.where(y == 0, 1, y)
            r = np.fmod(x, safe) if a["fmod"] else np.mod(x, safe)
            return np.where(y == 0, 0, r).astype(x.dtype)
        f = np.fmod if a["fmod"] else np.mod
        return f(x.astype(np.float64), y.astype(np.float64)).astype(x.dtype)


def _ref_pow(xs, a):
    x, y = xs
    with np.errstate(all="ignore"):
        if x.dtype.kind in "iu":
            return np.power(x, np.maximum(y, 0)).astype(x.dtype)
        return np.power(x.astype(np.float64), y.astype(np.float64)).astype(x.dtype)


def _ref_floordiv(xs, a):
    x, y = xs
    with np.errstate(all="ignore"):
        if x.dtype.kind in "iu":
            return np.where(y == 0, 0, x // np.where(y == 0, 1, y)).astype(x.dtype)
        return np.floor_divide(x.astype(np.float64), y.astype(np.float64)).astype(x.dtype)


def _in_type(fn):
    def ref(xs, a):
        with np.errstate(all="ignore"):
            out = fn(*xs)
        return np.asarray(out).astype(xs[0].dtype) if out.dtype != np.bool_ else out
    return ref


def _in_f64_binary(fn):
    def ref(xs, a):
        x, y = xs
        if x.dtype.kind in "iub":
            return _in_type(fn)(xs, a)
        with np.errstate(all="ignore"):
            return fn(x.astype(wide(x.dtype)), y.astype(wide(x.dtype))).astype(x.dtype)
    return ref


def binary(name, ref, accepts=is_numeric, result_dtype=None, attrs=None, traits=()):
    register_op(name, operands=2, shape=_binary_shape(accepts, result_dtype), reference=ref, attrs=attrs,
                traits=ELEMENTWISE | set(traits))


binary("add", _in_f64_binary(np.add), traits={"commutative", "complex"})
binary("sub", _in_f64_binary(np.subtract), traits=COMPLEX)
binary("mul", _in_f64_binary(np.multiply), traits={"commutative", "complex"})
binary("div", _ref_div, traits=COMPLEX)
binary("floordiv", _ref_floordiv)
binary("pow", _ref_pow)
binary("max", _in_type(np.maximum), traits={"commutative"})
binary("min", _in_type(np.minimum), traits={"commutative"})
binary("mod", _ref_mod, attrs={"fmod": Attr("bool", False)})
binary("atan2", _in_f64_binary(np.arctan2), is_float)  # atan2(y, x): the angle of the point (x, y)
binary("hypot", _in_f64_binary(np.hypot), is_float, traits={"commutative"})
binary("copysign", _in_f64_binary(np.copysign), is_float)
binary("fmax", _in_type(np.fmax), is_float, traits={"commutative"})  # max that ignores a NaN operand
binary("fmin", _in_type(np.fmin), is_float, traits={"commutative"})
binary("nextafter", _in_type(np.nextafter), is_float)  # in the operands' own type: float32 steps are float32's
binary("and", _in_type(np.logical_and), is_integral, traits={"commutative"})
binary("or", _in_type(np.logical_or), is_integral, traits={"commutative"})
binary("xor", _in_type(np.logical_xor), is_integral, traits={"commutative"})
binary("eq", _in_type(np.equal), lambda d: True, DType.bool, traits={"commutative", "complex"})
binary("ne", _in_type(np.not_equal), lambda d: True, DType.bool, traits={"commutative", "complex"})
binary("lt", _in_type(np.less), is_numeric, DType.bool)
binary("le", _in_type(np.less_equal), is_numeric, DType.bool)
binary("gt", _in_type(np.greater), is_numeric, DType.bool)
binary("ge", _in_type(np.greater_equal), is_numeric, DType.bool)


# -- where, cast -----------------------------------------------------------------------------------------
def _where_shape(ctx, types, attrs):
    c, x, y = types
    if c.dtype is not DType.bool:
        raise ctx.error(f"'where' condition must be bool, got {c}")
    dtype = unify_dtypes(ctx, [x, y], "where")
    return [x.with_shape(unify_shapes(ctx, types, "where")).with_dtype(dtype)]


register_op("where", operands=3, shape=_where_shape, reference=lambda xs, a: np.where(*xs),
            traits=ELEMENTWISE | COMPLEX)


def _ref_cast(xs, a):
    x, dtype = xs[0], a["dtype"].numpy
    if x.dtype.kind == "c" and dtype.kind != "c":  # complex -> real keeps the real part, as C and PyTorch do
        x = x.real
    with np.errstate(all="ignore"):
        if x.dtype.kind == "f" or x.dtype.name == "bfloat16":
            if dtype.kind in "iu":  # float -> int truncates toward zero; NaN and overflow give 0/wrap, not UB
                return np.nan_to_num(np.trunc(x.astype(np.float64)), nan=0.0).astype(np.int64).astype(dtype)
            if dtype.kind == "b":
                return x != 0
        return x.astype(dtype)


register_op("cast", shape=lambda ctx, types, a: [types[0].with_dtype(a["dtype"])], reference=_ref_cast,
            attrs={"dtype": Attr("dtype")}, traits=ELEMENTWISE | COMPLEX)
