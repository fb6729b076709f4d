"""ATen elementwise ops: unary math, arithmetic (PyTorch's promotion and broadcasting made explicit),
comparisons, logic, `where`/`masked_fill`, clamps and activations, dtype conversions, identity-like ops.

Arithmetic runs in the node's result dtype (what PyTorch computes in); comparisons in the promoted dtype
of their operands.
"""
from __future__ import annotations

import math

from ...ir.dtypes import DType
from .context import CONVERTERS, aten

# ATen op -> IR op for unary ops whose operand is first cast to the result dtype (an int tensor's exp is float).
_UNARY = {"abs": "abs", "neg": "neg", "exp": "exp", "log": "log", "sqrt": "sqrt", "rsqrt": "rsqrt",
          "reciprocal": "reciprocal", "tanh": "tanh", "sigmoid": "sigmoid", "relu": "relu", "erf": "erf",
          "sin": "sin", "cos": "cos", "tan": "tan", "floor": "floor", "ceil": "ceil", "sign": "sign",
          "silu": "silu", "hardswish": "hardswish", "asin": "asin", "acos": "acos", "atan": "atan", "sinh": "sinh",
          "cosh": "cosh", "asinh": "asinh", "acosh": "acosh", "atanh": "atanh", "trunc": "trunc", "fix": "trunc",
          "erfc": "erfc", "expm1": "expm1", "log1p": "log1p", "log2": "log2", "log10": "log10", "exp2": "exp2",
          "lgamma": "lgamma", "digamma": "digamma", "special_digamma": "digamma", "erfinv": "erfinv",
          "special_ndtr": "ndtr", "special_ndtri": "ndtri", "special_log_ndtr": "log_ndtr", "i0": "i0",
          "special_i0e": "i0e", "special_i1": "i1", "special_i1e": "i1e", "sinc": "sinc", "special_entr": "entr",
          "special_erfcx": "erfcx", "special_modified_bessel_i0": "i0", "special_modified_bessel_i1": "i1"}
_UNARY.update({f"special_{name}": name for name in ("bessel_j0", "bessel_j1", "bessel_y0", "bessel_y1",
                                                     "spherical_bessel_j0", "airy_ai")})
_UNARY.update(special_modified_bessel_k0="bessel_k0", special_modified_bessel_k1="bessel_k1",
              special_scaled_modified_bessel_k0="bessel_k0e", special_scaled_modified_bessel_k1="bessel_k1e")
# ATen op -> IR op for binary arithmetic, computed in the result dtype.
_ARITH = {"mul": "mul", "maximum": "max", "minimum": "min", "floor_divide": "floordiv", "remainder": "mod",
          "atan2": "atan2", "arctan2": "atan2", "hypot": "hypot", "copysign": "copysign", "fmax": "fmax",
          "fmin": "fmin", "nextafter": "nextafter", "xlogy": "xlogy", "special_xlogy": "xlogy",
          "special_xlog1py": "xlog1py", "special_zeta": "zeta"}
_ARITH.update({f"special_{name}_polynomial_{letter}": f"{name}_{letter}" for name, letters in
               (("chebyshev", "tuvw"), ("shifted_chebyshev", "tuvw"), ("hermite", ("h", "he"))) for letter in letters})
_ARITH.update(special_laguerre_polynomial_l="laguerre", special_legendre_polynomial_p="legendre")
_COMPARE = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge"}
_LOGIC = {"logical_and": "and", "logical_or": "or", "logical_xor": "xor"}
# ATen op -> (IR op on bool tensors, IR op on integer tensors).
_BITWISE = {"bitwise_and": ("and", "bitwise_and"), "__and__": ("and", "bitwise_and"),
            "bitwise_or": ("or", "bitwise_or"), "__or__": ("or", "bitwise_or"),
            "bitwise_xor": ("xor", "bitwise_xor"), "__xor__": ("xor", "bitwise_xor"),
            "bitwise_left_shift": (None, "shift_left"), "__lshift__": (None, "shift_left"),
            "bitwise_right_shift": (None, "shift_right"), "__rshift__": (None, "shift_right")}
# Ops that are the identity for inference (copies, aliases, layout changes, dropout in eval mode).
_IDENTITY = ("clone", "contiguous", "alias", "detach", "lift_fresh_copy", "dropout", "feature_dropout",
             "alpha_dropout", "lift_fresh")


def _unary(op):
    def convert(cx, x, *rest):
        return cx.b.emit(op, cx.tensor(x, cx.out_dtype()))
    return convert


# PyTorch's arithmetic on bool tensors is logic: True * False is False, True + True is True.
_BOOL_ARITH = {"mul": "and", "add": "or", "max": "or", "min": "and"}


def _arith(op, **attrs):
    def convert(cx, x, y, *rest):
        if cx.out_dtype() is DType.bool and op in _BOOL_ARITH:
            return cx.b.emit(_BOOL_ARITH[op], *cx.operands([x, y], DType.bool))
        return cx.b.emit(op, *cx.operands([x, y], cx.out_dtype()), **attrs)
    return convert


def _compare(op):
    def convert(cx, x, y):
        return cx.b.emit(op, *cx.operands([x, y], cx.promoted(x, y)))
    return convert


def _logic(op):
    def convert(cx, x, y):
        return cx.b.emit(op, *cx.operands([x, y], DType.bool))
    return convert


def _bitwise(ops):
    def convert(cx, x, y):
        dtype = cx.out_dtype()
        op = ops[0] if dtype is DType.bool else None if dtype.is_float else ops[1]
        if op is None:
            raise cx.error(f"{cx.op_name} is not defined for {dtype} tensors")
        return cx.b.emit(op, *cx.operands([x, y], dtype))
    return convert


def _identity(cx, x, *rest):
    return x


for _name, _op in _UNARY.items():
    aten(_name)(_unary(_op))
for _name, _op in _ARITH.items():
    aten(_name)(_arith(_op))
for _name, _op in _COMPARE.items():
    aten(_name)(_compare(_op))
for _name, _op in _LOGIC.items():
    aten(_name)(_logic(_op))
for _name, _op in _BITWISE.items():
    aten(_name)(_bitwise(_op))
aten(*_IDENTITY)(_identity)
aten("fmod")(_arith("mod", fmod=True))
aten("pow.Tensor_Tensor", "pow.Scalar")(_arith("pow"))


def _scaled(cx, y, alpha):
    return y if alpha in (None, 1) else cx.b.mul(y, cx.tensor(alpha, y.type.dtype, y.type.shape))


@aten("add")
def add(cx, x, y, alpha=1):
    if cx.out_dtype() is DType.bool:
        return _arith("add")(cx, x, y)
    x, y = cx.operands([x, y], cx.out_dtype())
    return cx.b.add(x, _scaled(cx, y, alpha))


@aten("sub")
def sub(cx, x, y, alpha=1):
    x, y = cx.operands([x, y], cx.out_dtype())
    return cx.b.sub(x, _scaled(cx, y, alpha))


@aten("rsub")
def rsub(cx, x, y, alpha=1):
    x, y = cx.operands([x, y], cx.out_dtype())
    return cx.b.sub(y, _scaled(cx, x, alpha))


@aten("div")
def div(cx, x, y, rounding_mode=None):
    x, y = cx.operands([x, y], cx.out_dtype())
    if rounding_mode == "floor":
        return cx.b.floordiv(x, y)
    q = cx.b.div(x, y)  # integer division truncates, so "trunc" only needs work for floats
    if rounding_mode == "trunc" and q.type.dtype.is_float:
        return cx.b.where(cx.b.lt(q, cx.tensor(0, q.type.dtype, q.type.shape)), cx.b.ceil(q), cx.b.floor(q))
    return q


@aten("pow.Tensor_Scalar")
def pow_scalar(cx, x, exponent):
    """Small integer and half powers become multiplies and square roots (as fast as PyTorch makes them)."""
    x = cx.tensor(x, cx.out_dtype())
    if exponent == 1:
        return x
    if exponent == 2:
        return cx.b.mul(x, x)
    if exponent == 3:
        return cx.b.mul(cx.b.mul(x, x), x)
    if exponent == 0.5:
        return cx.b.sqrt(x)
    if exponent == -1:
        return cx.b.reciprocal(x)
    return cx.b.pow(x, cx.tensor(exponent, x.type.dtype, x.type.shape))


@aten("round")
def round_(cx, x, decimals=0):
    if decimals:
        scale = cx.tensor(10.0 ** decimals, cx.out_dtype(), x.type.shape)
        return cx.b.div(cx.b.round(cx.b.mul(x, scale)), scale)
    return cx.b.round(x)


@aten("logit", "special_logit")
def logit(cx, x, eps=None):
    return cx.b.logit(cx.tensor(x, cx.out_dtype()), eps=-1.0 if eps is None else float(eps))


@aten("polygamma", "special_polygamma")
def polygamma(cx, n, x):
    """digamma for n = 0, else (-1)^(n+1) n! zeta(n + 1, x)."""
    x = cx.tensor(x, cx.out_dtype())
    if n == 0:
        return cx.b.digamma(x)
    t = x.type
    zeta = cx.b.zeta(cx.tensor(n + 1, t.dtype, t.shape), x)
    return cx.b.mul(zeta, cx.tensor((-1) ** (n + 1) * math.factorial(n), t.dtype, t.shape))


@aten("mvlgamma", "special_multigammaln")
def mvlgamma(cx, x, p):
    """The multivariate log-gamma: p (p - 1) / 4 log(pi) + sum over j < p of lgamma(x - j / 2)."""
    x = cx.tensor(x, cx.out_dtype())
    t = x.type
    out = cx.tensor(p * (p - 1) / 4 * math.log(math.pi), t.dtype, t.shape)
    for j in range(p):
        out = cx.b.add(out, cx.b.lgamma(cx.b.sub(x, cx.tensor(j / 2, t.dtype, t.shape))))
    return out


@aten("signbit")
def signbit(cx, x):
    """The sign bit: set for -0.0 and negative NaNs too (copysign reads it)."""
    x = cx.tensor(x, x.type.dtype if x.type.dtype.is_float else DType.f32)
    one = cx.tensor(1, x.type.dtype, x.type.shape)
    return cx.b.lt(cx.b.copysign(one, x), cx.tensor(0, x.type.dtype, x.type.shape))


@aten("ldexp")
def ldexp(cx, x, exponent):
    """x * 2^exponent, in the result dtype."""
    x, e = cx.operands([x, exponent], cx.out_dtype())
    return cx.b.mul(x, cx.b.exp2(e))


@aten("angle")
def angle(cx, x):
    """The argument of a real number: pi below 0, else 0; NaN stays NaN."""
    x = cx.tensor(x, cx.out_dtype())
    t = x.type
    arg = cx.b.where(cx.b.lt(x, cx.tensor(0, t.dtype, t.shape)), cx.tensor(math.pi, t.dtype, t.shape),
                     cx.tensor(0, t.dtype, t.shape))
    return cx.b.where(cx.b.isnan(x), x, arg)


@aten("isnan", "isinf")
def isnan(cx, x):
    if not x.type.dtype.is_float:
        return cx.b.full(0, x.type.shape, DType.bool)
    return cx.b.emit(cx.op_name, x)


@aten("logical_not")
def logical_not(cx, x):
    return cx.b.emit("not", cx.tensor(x, DType.bool))


@aten("bitwise_not")
def bitwise_not(cx, x):
    if x.type.dtype is DType.bool:
        return cx.b.emit("not", x)
    return cx.b.emit("bitwise_not", x)


@aten("where")
def where(cx, cond, x, y):
    shape, dtype = cx.common_shape(cond, x, y), cx.out_dtype()
    return cx.b.where(cx.tensor(cond, DType.bool, shape), cx.tensor(x, dtype, shape), cx.tensor(y, dtype, shape))


@aten("masked_fill")
def masked_fill(cx, x, mask, value):
    mask = cx.tensor(mask, DType.bool, x.type.shape)
    return cx.b.where(mask, cx.tensor(value, x.type.dtype, x.type.shape), x)


def _bound(value, default):
    return default if value is None else float(value)


@aten("clamp", "clip")
def clamp(cx, x, lo=None, hi=None):
    x = cx.tensor(x, cx.out_dtype())
    if hasattr(lo, "type") or hasattr(hi, "type"):  # tensor bounds
        if lo is not None:
            x = cx.b.max(*cx.operands([x, lo], x.type.dtype))
        if hi is not None:
            x = cx.b.min(*cx.operands([x, hi], x.type.dtype))
        return x
    return cx.b.clip(x, min=_bound(lo, -math.inf), max=_bound(hi, math.inf))


@aten("clamp_min")
def clamp_min(cx, x, lo):
    return clamp(cx, x, lo, None)


@aten("clamp_max")
def clamp_max(cx, x, hi):
    return clamp(cx, x, None, hi)


@aten("hardtanh")
def hardtanh(cx, x, lo=-1.0, hi=1.0):
    return cx.b.clip(x, min=float(lo), max=float(hi))


@aten("relu6")
def relu6(cx, x):
    return cx.b.clip(x, min=0.0, max=6.0)


@aten("gelu")
def gelu(cx, x, approximate="none"):
    return cx.b.gelu(x, approximate=approximate)


@aten("leaky_relu")
def leaky_relu(cx, x, slope=0.01):
    return cx.b.leaky_relu(x, alpha=float(slope))



@aten("rrelu_with_noise_functional", "rrelu_with_noise", "rrelu")
def rrelu(cx, x, *args):
    """Randomized leaky relu at inference: the mean slope (lower + upper) / 2; the noise output is unused."""
    lower, upper, training = (args[1:4] if cx.op_name.startswith("rrelu_with_noise") else args[:3])
    if training:
        raise cx.error("rrelu in training mode samples random slopes; Cuvil compiles inference graphs")
    y = cx.b.leaky_relu(x, alpha=(float(lower) + float(upper)) / 2)
    return (y, None) if cx.op_name == "rrelu_with_noise_functional" else y

@aten("hardsigmoid")
def hardsigmoid(cx, x):
    return cx.b.hardsigmoid(x, alpha=1 / 6, beta=0.5)


@aten("elu")
def elu(cx, x, alpha=1.0, scale=1.0, input_scale=1.0):
    if input_scale == 1:
        return cx.b.selu(x, alpha=float(alpha), gamma=float(scale))  # scale * (x > 0 ? x : alpha * (e^x - 1))
    t = x.type
    em1 = cx.b.sub(cx.b.exp(cx.b.mul(x, cx.tensor(input_scale, t.dtype, t.shape))), cx.tensor(1, t.dtype, t.shape))
    neg = cx.b.mul(em1, cx.tensor(alpha, t.dtype, t.shape))
    y = cx.b.where(cx.b.le(x, cx.tensor(0, t.dtype, t.shape)), neg, x)
    return cx.b.mul(y, cx.tensor(scale, t.dtype, t.shape))


@aten("softplus")
def softplus(cx, x, beta=1.0, threshold=20.0):
    """PyTorch returns x above the threshold; log(1 + e^x) differs from x there by less than e^-20."""
    if beta == 1:
        return cx.b.softplus(x)
    t = x.type
    scaled = cx.b.softplus(cx.b.mul(x, cx.tensor(beta, t.dtype, t.shape)))
    return cx.b.div(scaled, cx.tensor(beta, t.dtype, t.shape))


@aten("mish")
def mish(cx, x):
    return cx.b.mul(x, cx.b.tanh(cx.b.softplus(x)))


@aten("_to_copy", "to", "type_as", "_to_dim_order_copy")
def to_copy(cx, x, *rest):
    return cx.tensor(x, cx.out_dtype())


@aten("scalar_tensor")
def scalar_tensor(cx, value, *rest):
    return cx.tensor(value, cx.out_dtype())


CONVERTERS["prims.scalar_tensor"] = scalar_tensor  # what xlogy(2.0, t) decomposes into
