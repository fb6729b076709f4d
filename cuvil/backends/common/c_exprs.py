"""C for one element of each elementwise op: a table keyed by op name, like Inductor's per-op overrides.

Shared by the C backends (CPU and CUDA): each defines the helpers named here (cuvil_expf, CUVIL_MAX, ...) in its
own runtime header.

Each entry takes the operands' C expressions, the op's attributes and the compute type, and returns a C
expression. f16 and bf16 compute in float; float math uses the vectorisable helpers of `cuvil_rt.h`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ...ir.dtypes import DType
from ...ops import registry

STORAGE = {DType.f64: "double", DType.f32: "float", DType.f16: "_Float16", DType.bf16: "uint16_t",
           DType.i64: "int64_t", DType.i32: "int32_t", DType.i16: "int16_t", DType.i8: "int8_t",
           DType.u8: "uint8_t", DType.bool: "uint8_t", DType.c64: "float _Complex", DType.c128: "double _Complex"}


@dataclass(frozen=True)
class CType:
    """How a dtype is computed with in C."""

    dtype: DType

    @property
    def name(self) -> str:
        return "float" if self.dtype in (DType.f16, DType.bf16) else STORAGE[self.dtype]

    @property
    def is_float(self) -> bool:
        """Float arithmetic (`/` divides, literals have a point): the float types and the complex ones."""
        return self.dtype.is_float or self.dtype.is_complex

    @property
    def f(self) -> str:
        """The libm suffix: `expf` for float, `exp` for double."""
        return "" if self.dtype in (DType.f64, DType.c128) else "f"

    def lit(self, value: float) -> str:
        if self.dtype is DType.bool:
            return "1" if value else "0"
        if not self.is_float:
            return str(int(value))
        if math.isnan(value):
            return "NAN"
        if math.isinf(value):
            return "INFINITY" if value > 0 else "(-INFINITY)"
        text = repr(float(value))
        return text if self.dtype in (DType.f64, DType.c128) else text + "f"


def load(dtype: DType, ptr: str, index: str) -> str:
    if dtype is DType.bf16:
        return f"cuvil_bf16_to_f32({ptr}[{index}])"
    if dtype is DType.f16:
        return f"(float){ptr}[{index}]"
    return f"{ptr}[{index}]"


def store_value(dtype: DType, expr: str) -> str:
    if dtype is DType.bf16:
        return f"cuvil_f32_to_bf16({expr})"
    if dtype is DType.f16:
        return f"(_Float16)({expr})"
    return expr


def c_string(text: str) -> str:
    """`text` as a C string literal: printable ASCII as it is, quotes and backslashes escaped, other bytes of its
    UTF-8 and `?` (no trigraphs) in octal: a file or ONNX node name in an error message."""
    out = []
    for byte in text.encode("utf-8"):
        ch = chr(byte)
        out.append("\\" + ch if ch in '"\\' else ch if 32 <= byte < 127 and ch != "?" else f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def c_dim(d) -> str:
    """A dimension as a C expression over the kernel's `s_<symbol>` variables (sizes are non-negative, so
    C's truncating `/` and `%` equal floor division and modulo)."""
    if isinstance(d, int):
        return str(d)
    parts, products = [], False
    for monomial, coef in d.terms:
        factors = [str(abs(coef))] if abs(coef) != 1 or not monomial else []
        for atom in monomial:
            factors.append(f"s_{atom}" if isinstance(atom, str) else
                           f"({c_dim(atom[1])} {'/' if atom[0] == '//' else '%'} {atom[2]})")
        parts.append(("-" if coef < 0 else "+") + "*".join(factors))
        products |= len(factors) > 1
    text = "".join(parts).lstrip("+")
    # parenthesised unless one atom: callers write `i % <dim>` and `i / <dim>`, where 4*s_b would bind wrongly
    return f"({text})" if len(d.terms) > 1 or products or d.terms[0][1] < 0 else text


def _fn(name):
    """A float helper of cuvil_rt.h for float, the libm function for double."""
    return lambda x, a, t: f"cuvil_{name}f({x[0]})" if t.f else f"{name}({x[0]})"


def _libm(name):
    return lambda x, a, t: f"{name}{t.f}({x[0]})"


def _gelu(x, a, t):
    v = x[0]
    if a["approximate"] == "tanh":
        inner = f"{t.lit(math.sqrt(2 / math.pi))} * ({v} + {t.lit(0.044715)} * {v} * {v} * {v})"
        tanh = f"cuvil_tanhf({inner})" if t.f else f"tanh({inner})"
        return f"({t.lit(0.5)} * {v} * ({t.lit(1)} + {tanh}))"
    erf = f"cuvil_erff({v} * {t.lit(1 / math.sqrt(2))})" if t.f else f"erf({v} * {t.lit(1 / math.sqrt(2))})"
    return f"({t.lit(0.5)} * {v} * ({t.lit(1)} + {erf}))"


def _exp(t, v):
    return f"cuvil_expf({v})" if t.f else f"exp({v})"


def _clip(x, a, t):
    v = x[0]
    if a["min"] != -math.inf:
        v = f"CUVIL_MAX({v}, ({t.name}){t.lit(a['min'])})"
    if a["max"] != math.inf:
        v = f"CUVIL_MIN({v}, ({t.name}){t.lit(a['max'])})"
    return v


def _unit_clip(expr: str, t: CType) -> str:
    return _clip([expr], {"min": 0.0, "max": 1.0}, t)


def _div(x, a, t):
    return f"({x[0]} / {x[1]})" if t.is_float else f"CUVIL_IDIV({x[0]}, {x[1]})"


def _floordiv(x, a, t):
    return f"floor{t.f}({x[0]} / {x[1]})" if t.is_float else f"CUVIL_IFLOORDIV({x[0]}, {x[1]})"


def _mod(x, a, t):
    if t.is_float:
        r = f"fmod{t.f}({x[0]}, {x[1]})"
        if a["fmod"]:
            return r
        return f"cuvil_pymod{t.f}({x[0]}, {x[1]})"
    return f"CUVIL_IFMOD({x[0]}, {x[1]})" if a["fmod"] else f"CUVIL_IMOD({x[0]}, {x[1]})"


def _pow(x, a, t):
    if t.is_float:
        return f"pow{t.f}({x[0]}, {x[1]})"
    return f"cuvil_ipow({x[0]}, {x[1]})"


def _cast(x, a, t, src: DType):
    target = a["dtype"]
    if target is DType.bool:
        return f"({x[0]} != 0)"
    ct = CType(target)
    if src.is_complex and not target.is_complex:  # the real part, as in the reference
        return _cast([f"(__real__ {x[0]})"], a, CType(src.real), src.real)
    if src.is_float and not target.is_float and not target.is_complex:  # truncate toward zero; NaN gives 0
        return f"({ct.name})(int64_t)({x[0]} != {x[0]} ? 0 : {x[0]})"
    if target in (DType.f16, DType.bf16) and src != target:  # computed in float: round (and overflow) here
        stored = store_value(target, x[0])
        return f"cuvil_bf16_to_f32({stored})" if target is DType.bf16 else f"(float){stored}"
    return f"({ct.name})({x[0]})"


# op name -> (operand C expressions, attrs, compute CType of the operands) -> C expression
ELEMENTWISE = {
    "neg": lambda x, a, t: f"(-{x[0]})",
    "abs": lambda x, a, t: f"fabs{t.f}({x[0]})" if t.is_float else f"({x[0]} < 0 ? -{x[0]} : {x[0]})",
    "sign": lambda x, a, t: (f"({x[0]} != {x[0]} ? {x[0]} : " if t.is_float else "(") +  # NaN stays NaN
            f"({t.name})(({x[0]} > 0) - ({x[0]} < 0)))",
    "exp": lambda x, a, t: _exp(t, x[0]),
    "log": _fn("log"),
    "sqrt": _libm("sqrt"),
    "rsqrt": lambda x, a, t: f"({t.lit(1)} / sqrt{t.f}({x[0]}))",
    "reciprocal": lambda x, a, t: f"({t.lit(1)} / {x[0]})",
    "tanh": _fn("tanh"),
    "sigmoid": lambda x, a, t: f"cuvil_sigmoidf({x[0]})" if t.f else f"(1.0 / (1.0 + exp(-{x[0]})))",
    "relu": lambda x, a, t: f"CUVIL_MAX({x[0]}, ({t.name})0)",  # NaN stays NaN, as in the reference
    "erf": _fn("erf"),
    "sin": _libm("sin"),
    "cos": _libm("cos"),
    "tan": _libm("tan"),
    "asin": _libm("asin"),
    "acos": _libm("acos"),
    "atan": _libm("atan"),
    "sinh": _libm("sinh"),
    "cosh": _libm("cosh"),
    "asinh": _libm("asinh"),
    "acosh": _libm("acosh"),
    "atanh": _libm("atanh"),
    "expm1": _libm("expm1"),
    "log1p": _libm("log1p"),
    "log2": _libm("log2"),
    "log10": _libm("log10"),
    "exp2": _libm("exp2"),
    "trunc": _libm("trunc"),
    "erfc": _libm("erfc"),
    "lgamma": _libm("lgamma"),
    "floor": _libm("floor"),
    "ceil": _libm("ceil"),
    "round": _libm("nearbyint"),
    "not": lambda x, a, t: f"(!{x[0]})",
    "isnan": lambda x, a, t: f"({x[0]} != {x[0]})",
    "isinf": lambda x, a, t: f"(fabs{t.f}({x[0]}) == INFINITY)",
    "leaky_relu": lambda x, a, t: f"({x[0]} < 0 ? {x[0]} * {t.lit(a['alpha'])} : {x[0]})",
    "elu": lambda x, a, t: f"({x[0]} < 0 ? {t.lit(a['alpha'])} * ({_exp(t, x[0])} - 1) : {x[0]})",
    "selu": lambda x, a, t: (f"({t.lit(a['gamma'])} * ({x[0]} <= 0 ? {t.lit(a['alpha'])} * ({_exp(t, x[0])} - 1)"
                             f" : {x[0]}))"),
    "gelu": _gelu,
    "softplus": lambda x, a, t: (f"(({x[0]} > 0 ? {x[0]} : 0) + log1p{t.f}({_exp(t, f'-fabs{t.f}({x[0]})')}))"),
    "hardsigmoid": lambda x, a, t: _unit_clip(f"({x[0]} * {t.lit(a['alpha'])} + {t.lit(a['beta'])})", t),
    "hardswish": lambda x, a, t: f"({x[0]} * {_unit_clip(f'({x[0]} / {t.lit(6)} + {t.lit(0.5)})', t)})",
    "silu": lambda x, a, t: (f"({x[0]} * cuvil_sigmoidf({x[0]}))" if t.f else f"({x[0]} / (1.0 + exp(-{x[0]})))"),
    "clip": _clip,
    "add": lambda x, a, t: f"({x[0]} + {x[1]})",
    "sub": lambda x, a, t: f"({x[0]} - {x[1]})",
    "mul": lambda x, a, t: f"({x[0]} * {x[1]})",
    "div": _div,
    "floordiv": _floordiv,
    "pow": _pow,
    "max": lambda x, a, t: f"CUVIL_MAX({x[0]}, {x[1]})",
    "min": lambda x, a, t: f"CUVIL_MIN({x[0]}, {x[1]})",
    "mod": _mod,
    "atan2": lambda x, a, t: f"atan2{t.f}({x[0]}, {x[1]})",
    "hypot": lambda x, a, t: f"hypot{t.f}({x[0]}, {x[1]})",
    "copysign": lambda x, a, t: f"copysign{t.f}({x[0]}, {x[1]})",
    "fmax": lambda x, a, t: f"fmax{t.f}({x[0]}, {x[1]})",
    "fmin": lambda x, a, t: f"fmin{t.f}({x[0]}, {x[1]})",
    "nextafter": lambda x, a, t: f"nextafter{t.f}({x[0]}, {x[1]})",
    "and": lambda x, a, t: f"({x[0]} && {x[1]})",
    "or": lambda x, a, t: f"({x[0]} || {x[1]})",
    "xor": lambda x, a, t: f"(!{x[0]} != !{x[1]})",
    "eq": lambda x, a, t: f"({x[0]} == {x[1]})",
    "ne": lambda x, a, t: f"({x[0]} != {x[1]})",
    "lt": lambda x, a, t: f"({x[0]} < {x[1]})",
    "le": lambda x, a, t: f"({x[0]} <= {x[1]})",
    "gt": lambda x, a, t: f"({x[0]} > {x[1]})",
    "ge": lambda x, a, t: f"({x[0]} >= {x[1]})",
    "where": lambda x, a, t: f"({x[0]} ? {x[1]} : {x[2]})",
    "random_uniform": lambda x, a, t: (f"cuvil_uniform{'f' if a['dtype'] is DType.f32 else ''}({x[0]}, "
                                       f"{a['stream']}u, {a['seed'] & 0xFFFFFFFF}u, {a['seed'] >> 32}u)"),
    # complex (GNU C's operators on C99 _Complex, which GCC and Clang share): no <complex.h>, whose `I` would
    # clash with generated names
    "complex": lambda x, a, t: f"__builtin_complex(({t.name}){x[0]}, ({t.name}){x[1]})",
    "real": lambda x, a, t: f"(__real__ {x[0]})",
    "imag": lambda x, a, t: f"(__imag__ {x[0]})",
    "conj": lambda x, a, t: f"(~{x[0]})",
    "bitcast": lambda x, a, t: f"CUVIL_BITCAST({t.name}, {STORAGE[a['dtype']]}, {x[0]})",
}


def elementwise_expr(name: str, operands: list, attrs: dict, operand_dtype: DType) -> str:
    if name == "cast":
        return _cast(operands, attrs, CType(operand_dtype), operand_dtype)
    if name not in ELEMENTWISE:  # a user op that brought its own C
        return "(" + registry.get_op(name).c_expr.format(*operands) + ")"
    return ELEMENTWISE[name](operands, attrs, CType(operand_dtype))


def is_user_elementwise(name: str) -> bool:
    if not registry.has_op(name):
        return False
    opdef = registry.get_op(name)
    return opdef.c_expr is not None and "elementwise" in opdef.traits
