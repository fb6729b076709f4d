"""Recognise decomposed gelu, silu, softmax and layer_norm (as ONNX exporters and older opsets write them) and
put the composite op back, so the backend can run its fused kernel instead of several passes over memory.
"""
from __future__ import annotations

import math

from ..ir.core import Function, Op, Value
from .manager import Pass
from .rewrite import Pat, Rule, apply_rules, splat_value

SQRT2 = math.sqrt(2.0)


def near(value: float, rel: float = 1e-6):
    """A constant whose elements all equal `value` up to float32 rounding."""
    def check(v: Value, module) -> bool:
        s = splat_value(v, module)
        return s is not None and abs(s - value) <= rel * abs(value) + 1e-12
    return Pat(None, where=check)


def bcast(p: Pat) -> Pat:
    """`p`, seen through a `broadcast_to` (frontends broadcast scalars and vectors explicitly)."""
    return Pat("broadcast_to", p)


_X = Pat.any("x")
_ERF_ARG = [Pat("div", _X, near(SQRT2)), Pat("mul", _X, near(1 / SQRT2))]
_ONE_PLUS_ERF = [Pat("add", Pat("erf", arg), near(1.0)) for arg in _ERF_ARG]
# the tanh form (GPT-2's NewGELU): 1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)), x^3 as Simplify writes pow(x, 3)
_CUBE = Pat("mul", Pat("mul", _X, _X), _X)
_TANH_ARG = Pat("mul", Pat("add", _X, Pat("mul", _CUBE, near(0.044715))), near(math.sqrt(2 / math.pi)))
_ONE_PLUS_TANH = [Pat("add", Pat("tanh", _TANH_ARG), near(1.0))]


def _halved(ones: list) -> list:
    """0.5 x (one_plus), in the three groupings exporters write (mul matches either operand order)."""
    return ([Pat("mul", Pat("mul", _X, near(0.5)), t) for t in ones]
            + [Pat("mul", _X, Pat("mul", t, near(0.5))) for t in ones]
            + [Pat("mul", Pat("mul", _X, t), near(0.5)) for t in ones])


GELU_PATTERNS = _halved(_ONE_PLUS_ERF)
GELU_TANH_PATTERNS = _halved(_ONE_PLUS_TANH)


def _gelu(b, m):
    return b.gelu(m.x)


def _gelu_tanh(b, m):
    return b.gelu(m.x, approximate="tanh")


# x * sigmoid(x), as ONNX exporters write SiLU (mul is commutative: either order matches)
SILU_PATTERN = Pat("mul", _X, Pat("sigmoid", _X))


def _silu(b, m):
    return b.silu(m.x)


def _last_axis(op: Op):
    axes = op.attrs["axes"]
    rank = op.operands[0].type.rank
    return len(axes) == 1 and axes[0] == rank - 1 and op.attrs["keepdims"]


SOFTMAX_PATTERN = Pat("div", Pat("exp", Pat("sub", _X, bcast(Pat("reduce_max", _X, bind="max"))), bind="e"),
                      bcast(Pat("reduce_sum", Pat.any("e2"), bind="sum")))


def _softmax(b, m):
    if m.e is not m.e2 or not _last_axis(m.max.owner) or not _last_axis(m.sum.owner):
        return None
    return b.softmax(m.x, axis=m.x.type.rank - 1)


_MEAN = Pat("reduce_mean", _X, bind="mean")
_CENTERED = Pat("sub", _X, bcast(_MEAN), bind="d")
_VAR_EPS = Pat("add", Pat("reduce_mean", Pat("mul", Pat.any("d"), Pat.any("d")), bind="var"), Pat.splat(bind="eps"))
_NORMED = [Pat("div", _CENTERED, bcast(Pat("sqrt", _VAR_EPS))),
           Pat("mul", _CENTERED, bcast(Pat("reciprocal", Pat("sqrt", _VAR_EPS)))),
           Pat("mul", _CENTERED, bcast(Pat("rsqrt", _VAR_EPS)))]
LAYER_NORM_PATTERNS = [Pat("add", Pat("mul", n, bcast(Pat.any("scale"))), bcast(Pat.any("bias"))) for n in _NORMED]


def _layer_norm(b, m):
    """Standardise over the last axis, then scale and shift with vectors of that axis' size."""
    x = m.x
    if not _last_axis(m.mean.owner) or not _last_axis(m.var.owner):
        return None
    axis = x.type.rank - 1
    if m.scale.type.shape != x.type.shape[axis:] or m.bias.type.shape != x.type.shape[axis:]:
        return None
    return b.layer_norm(x, m.scale, m.bias, axis=axis, epsilon=splat_value(m.eps, b.module))


RECOMPOSE_RULES = ([Rule(p, _gelu, "gelu") for p in GELU_PATTERNS]
                   + [Rule(p, _gelu_tanh, "gelu-tanh") for p in GELU_TANH_PATTERNS]
                   + [Rule(SILU_PATTERN, _silu, "silu")]
                   + [Rule(SOFTMAX_PATTERN, _softmax, "softmax")]
                   + [Rule(p, _layer_norm, "layer-norm") for p in LAYER_NORM_PATTERNS])


class Recompose(Pass):
    """Decomposed gelu, silu, softmax (last axis) and layer_norm (last axis) become the composite op again."""

    name = "recompose"

    def run_on_operation(self, fn: Function) -> bool:
        return apply_rules(fn, RECOMPOSE_RULES)
