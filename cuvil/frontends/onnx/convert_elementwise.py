"""Elementwise ONNX ops: unary math and activations, broadcasting binary and variadic ops, comparisons,
logic, `Where`, `Cast`/`CastLike`, `Clip`, bit shifts and bitwise ops (spelled with integer arithmetic)."""
from __future__ import annotations

import math

from onnx import TensorProto as T

from ...ir.dtypes import DType
from .carriers import CARRIERS, quantize, quantize_e8m0, unsigned_order, wrap
from .registry import converter
from .tensors import Tensor, ir_dtype

# ONNX op -> IR op, for unary ops that map one to one.
UNARY = {"Abs": "abs", "Neg": "neg", "Exp": "exp", "Log": "log", "Sqrt": "sqrt", "Reciprocal": "reciprocal",
         "Tanh": "tanh", "Sigmoid": "sigmoid", "Relu": "relu", "Erf": "erf", "Sin": "sin", "Cos": "cos", "Tan": "tan",
         "Floor": "floor", "Ceil": "ceil", "Round": "round", "Sign": "sign", "Not": "not", "IsNaN": "isnan",
         "Softplus": "softplus", "HardSwish": "hardswish", "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh",
         "Acosh": "acosh", "Atanh": "atanh", "Atan": "atan", "Asin": "asin", "Acos": "acos"}
# ONNX op -> (IR op, {ONNX attribute: (IR attribute, ONNX default)}).
UNARY_ATTRS = {"Elu": ("elu", {"alpha": ("alpha", 1.0)}),
               "LeakyRelu": ("leaky_relu", {"alpha": ("alpha", 0.01)}),
               "Selu": ("selu", {"alpha": ("alpha", 1.67326319217681884765625),
                                 "gamma": ("gamma", 1.05070102214813232421875)}),
               "HardSigmoid": ("hardsigmoid", {"alpha": ("alpha", 0.2), "beta": ("beta", 0.5)}),
               "Gelu": ("gelu", {"approximate": ("approximate", "none")})}
BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "And": "and", "Or": "or", "Xor": "xor",
          "Equal": "eq", "Greater": "gt", "Less": "lt", "GreaterOrEqual": "ge", "LessOrEqual": "le"}
VARIADIC = {"Max": "max", "Min": "min", "Sum": "add", "Mean": "add"}
ORDERED = {"gt", "lt", "ge", "le", "max", "min"}


def _unary(ir_op):
    return lambda ctx: [ctx.b.emit(ir_op, ctx.x(0))]


def _unary_attrs(ir_op, spec):
    def convert(ctx):
        attrs = {ir_name: ctx.attr(name, default) for name, (ir_name, default) in spec.items()}
        return [ctx.b.emit(ir_op, ctx.x(0), **attrs)]
    return convert


def _binary(ir_op):
    def convert(ctx):
        x, y = ctx.broadcast(ctx.x(0), ctx.x(1))
        if ir_op in ORDERED:  # u64 carried in i64 compares by its bits shifted
            x, y = (unsigned_order(ctx, v, ctx.tensor(0).elem) for v in (x, y))
        return [ctx.b.emit(ir_op, x, y)]
    return convert


def _variadic(ir_op, mean=False):
    def convert(ctx):
        elem = ctx.tensor(0).elem
        values = ctx.broadcast(*[ctx.x(i) for i in range(len(ctx.inputs)) if ctx.has(i)])
        if ir_op in ORDERED:
            values = [unsigned_order(ctx, v, elem) for v in values]
        out = values[0]
        for v in values[1:]:
            out = ctx.b.emit(ir_op, out, v)
        if ir_op in ORDERED:
            out = unsigned_order(ctx, out, elem)
        return [ctx.b.div(out, ctx.scalar_like(len(values), out)) if mean else out]
    return convert


for _onnx, _ir in UNARY.items():
    converter(_onnx)(_unary(_ir))
for _onnx, (_ir, _spec) in UNARY_ATTRS.items():
    converter(_onnx)(_unary_attrs(_ir, _spec))
for _onnx, _ir in BINARY.items():
    converter(_onnx)(_binary(_ir))
for _onnx, _ir in VARIADIC.items():
    converter(_onnx)(_variadic(_ir, _onnx == "Mean"))


# -- activations spelled with other ops ------------------------------------------------------------------
@converter("Identity")
def identity(ctx):
    return [ctx.value(0)]  # sequences and optionals too


@converter("Softsign")
def softsign(ctx):
    x = ctx.x(0)
    return [ctx.b.div(x, ctx.b.add(ctx.b.abs(x), ctx.scalar_like(1, x)))]


@converter("ThresholdedRelu")
def thresholded_relu(ctx):
    x = ctx.x(0)
    return [ctx.b.where(ctx.b.gt(x, ctx.scalar_like(ctx.attr("alpha", 1.0), x)), x, ctx.scalar_like(0, x))]


@converter("Celu")
def celu(ctx):
    x, alpha = ctx.x(0), ctx.attr("alpha", 1.0)
    neg = ctx.b.mul(ctx.b.elu(ctx.b.div(x, ctx.scalar_like(alpha, x)), alpha=1.0), ctx.scalar_like(alpha, x))
    return [ctx.b.where(ctx.b.gt(x, ctx.scalar_like(0, x)), x, neg)]


@converter("Shrink")
def shrink(ctx):
    x, lambd, bias = ctx.x(0), ctx.attr("lambd", 0.5), ctx.attr("bias", 0.0)
    b = ctx.b
    low = b.where(b.lt(x, ctx.scalar_like(-lambd, x)), b.add(x, ctx.scalar_like(bias, x)), ctx.scalar_like(0, x))
    return [b.where(b.gt(x, ctx.scalar_like(lambd, x)), b.sub(x, ctx.scalar_like(bias, x)), low)]


@converter("PRelu")
def prelu(ctx):
    x, slope = ctx.broadcast(ctx.x(0), ctx.x(1))
    return [ctx.b.where(ctx.b.lt(x, ctx.scalar_like(0, x)), ctx.b.mul(x, slope), x)]


@converter("Mish")
def mish(ctx):
    x = ctx.x(0)
    return [ctx.b.mul(x, ctx.b.tanh(ctx.b.softplus(x)))]


@converter("Swish")
def swish(ctx):
    x = ctx.x(0)
    return [ctx.b.mul(x, ctx.b.sigmoid(ctx.b.mul(x, ctx.scalar_like(ctx.attr("alpha", 1.0), x))))]


@converter("IsInf")
def is_inf(ctx):
    x, b = ctx.x(0), ctx.b
    inf = b.isinf(x)
    if not ctx.attr("detect_positive", 1):
        inf = b.emit("and", inf, b.lt(x, ctx.scalar_like(0, x)))
    if not ctx.attr("detect_negative", 1):
        inf = b.emit("and", inf, b.gt(x, ctx.scalar_like(0, x)))
    return [inf]


def _f64(ctx, x):
    """Compute in float64 (then round once), as the IR's own float references do."""
    return ctx.cast(x, DType.f64)


# -- binary ops with their own rules ------------------------------------------------------------------------
@converter("Pow")
def pow_(ctx):
    x, y = ctx.x(0), ctx.x(1)
    if x.type.dtype.is_float:
        x, y = ctx.broadcast(x, ctx.cast(y, x.type.dtype))
        return [ctx.b.pow(x, y)]
    x64, y64 = ctx.broadcast(_f64(ctx, x), _f64(ctx, y))  # integer base, any exponent: exact in float64
    return [ctx.cast(ctx.b.pow(x64, y64), x.type.dtype)]


@converter("Mod")
def mod(ctx):
    x, y = ctx.broadcast(ctx.x(0), ctx.x(1))
    return [ctx.b.mod(x, y, fmod=bool(ctx.attr("fmod", 0)))]


@converter("Where")
def where(ctx):
    c, x, y = ctx.broadcast(ctx.x(0), ctx.x(1), ctx.x(2))
    return [ctx.b.where(c, x, y)]


@converter("Clip")
def clip(ctx):
    x = ctx.x(0)
    if ctx.opset < 11:
        return [ctx.b.clip(x, min=ctx.attr("min", -math.inf), max=ctx.attr("max", math.inf))]
    for i, op in ((1, "max"), (2, "min")):
        if ctx.has(i):
            x = ctx.b.emit(op, x, ctx.expand(ctx.x(i), x.type.shape))
    return [x]


def convert_elem(ctx, v, dst: int, saturate: bool = True) -> Tensor:
    """v as ONNX element type `dst`: an IR cast, then for carried types the narrow type's rounding or wrap."""
    c = CARRIERS.get(dst)
    if c is None:
        return Tensor(value=ctx.cast(v, ir_dtype(dst, f"{ctx.where}: the target type")), elem=dst)
    if dst == T.FLOAT8E8M0:
        return Tensor(value=quantize_e8m0(ctx, v, saturate, ctx.attr("round_mode", "up")), elem=dst)
    if c.float_format:
        return Tensor(value=quantize(ctx, v, dst, saturate), elem=dst)
    whole = ctx.cast(v, DType.i64)  # floats truncate toward zero, NaN gives 0
    return Tensor(value=ctx.cast(wrap(ctx, whole, dst), c.ir), elem=dst)


@converter("Cast")
def cast(ctx):
    return [convert_elem(ctx, ctx.x(0), ctx.attr("to"), bool(ctx.attr("saturate", 1)))]


@converter("CastLike")
def cast_like(ctx):
    return [convert_elem(ctx, ctx.x(0), ctx.tensor(1).elem, bool(ctx.attr("saturate", 1)))]


# ONNX types carried in a wider IR type -> the IR type of their own width, whose bits `bitcast` reads
_SAME_WIDTH = {T.UINT16: DType.i16, T.UINT32: DType.i32, T.UINT64: DType.i64}


@converter("BitCast")
def bit_cast(ctx):
    """x's bits read as element type `to`: carried unsigned types go through the signed IR type of their width
    (a wrapping cast), bool targets compare the byte with 0."""
    src, dst = ctx.tensor(0).elem, ctx.attr("to")
    for elem in (src, dst):
        if elem in CARRIERS and elem not in _SAME_WIDTH:
            raise ctx.unsupported(f"BitCast of {CARRIERS[elem].numpy_name} is not supported")
    x = ctx.x(0)
    if src in _SAME_WIDTH:
        x = ctx.cast(x, _SAME_WIDTH[src])
    if dst == T.BOOL:
        target = ir_dtype(src) if src not in _SAME_WIDTH else _SAME_WIDTH[src]
        if target.itemsize != 1:
            raise ctx.error(f"BitCast to bool needs an 8-bit input, got {8 * target.itemsize} bits")
        return [Tensor(value=ctx.b.ne(x, ctx.scalar_like(0, x)), elem=dst)]
    bits = ctx.b.emit("bitcast", x, dtype=_SAME_WIDTH.get(dst) or ir_dtype(dst, f"{ctx.where}: the target type"))
    if dst not in _SAME_WIDTH:
        return [Tensor(value=bits, elem=dst)]
    return [Tensor(value=ctx.cast(wrap(ctx, ctx.cast(bits, DType.i64), dst), CARRIERS[dst].ir), elem=dst)]


# -- bits: the IR's bitwise ops, with uint16/32 carried non-negative and uint64's bits carried in i64 --------
@converter("BitShift")
def bit_shift(ctx):
    """ONNX shifts unsigned integers only. A left shift wraps back into the narrow type; uint64's right shift
    in its i64 carrier is made logical by masking off the sign fill (shifts by 64 or more give 0)."""
    elem, b = ctx.tensor(0).elem, ctx.b
    x, y = ctx.broadcast(ctx.x(0), ctx.x(1))
    if ctx.attr("direction") == "LEFT":
        return [wrap(ctx, b.emit("shift_left", x, y), elem)]
    shifted = b.emit("shift_right", x, y)
    if elem != T.UINT64:
        return [shifted]
    kept = b.emit("bitwise_not", b.emit("shift_left", ctx.scalar_like(-1, x), b.sub(ctx.scalar_like(64, y), y)))
    in_range = b.emit("and", b.ge(y, ctx.scalar_like(0, y)), b.lt(y, ctx.scalar_like(64, y)))
    return [b.where(in_range, b.emit("bitwise_and", shifted, kept), ctx.scalar_like(0, x))]


def _bitwise(op):
    def convert(ctx):
        return [ctx.b.emit(op, *ctx.broadcast(ctx.x(0), ctx.x(1)))]
    return convert


for _onnx, _op in {"BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor"}.items():
    converter(_onnx)(_bitwise(_op))


@converter("BitwiseNot")
def bitwise_not(ctx):
    """uint16/32 values sit in a wider carrier, where flipping every bit would leave their range."""
    x, carrier = ctx.x(0), CARRIERS.get(ctx.tensor(0).elem)
    if carrier is not None and carrier.bits:
        return [ctx.b.sub(ctx.scalar_like(2 ** carrier.bits - 1, x), x)]
    return [ctx.b.emit("bitwise_not", x)]
