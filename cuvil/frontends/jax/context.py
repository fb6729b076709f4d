"""The primitive table and the context each converter gets.

A converter is registered for jaxpr primitives by name (`@primitive("add", "add_any")`) and called as
`fn(cx, *operands, **params)` with the equation's operands as IR values and its params as JAX gave them.
It returns a value or a list of values (one per outvar). Shapes come from the outvars' avals; JAX's symbolic
dims (`jax.export.symbolic_shape`) become Cuvil symbolic dims of the same names.
"""
from __future__ import annotations

import re
from typing import Callable

import numpy as np

from ...errors import UnsupportedError
from ...ir.core import Value
from ...ir.dtypes import DType
from ...ir.symbolic import Dim, SymExpr, parse_dim
from ...ir.types import TensorType

PRIMITIVES: dict[str, Callable] = {}
_CALL = re.compile(r"(floordiv|mod)\(([^(),]*),\s*(\d+)\)")


def primitive(*names: str):
    """Register the decorated function as the converter of the named jaxpr primitives."""
    def register(fn):
        for name in names:
            PRIMITIVES[name] = fn
        return fn
    return register


def to_dim(d) -> Dim:
    """An int or a JAX symbolic dim (`_DimExpr`, printed `2*b + 1`, `floordiv(b, 2)`) as a Cuvil dim."""
    if isinstance(d, (int, np.integer)):
        return int(d)
    text = str(d)
    while _CALL.search(text):  # innermost calls first: floordiv(e, k) -> (e)//k
        text = _CALL.sub(lambda m: f"(({m.group(2)}){'//' if m.group(1) == 'floordiv' else '%'}{m.group(3)})", text)
    try:
        return parse_dim(text)
    except ValueError:
        raise UnsupportedError(f"the symbolic size {d} has no Cuvil equivalent (max, min and powers are not "
                               f"supported)") from None


def aval_type(aval) -> TensorType:
    return TensorType(DType.from_numpy(aval.dtype), tuple(to_dim(d) for d in aval.shape))


class Ctx:
    """What a converter sees: the builder `b`, the equation, the walker, and operand helpers."""

    def __init__(self, walker, b, eqn):
        self.walker, self.b, self.eqn = walker, b, eqn

    def out_type(self, i: int = 0) -> TensorType:
        return aval_type(self.eqn.outvars[i].aval)

    def error(self, message: str) -> UnsupportedError:
        return UnsupportedError(f"jaxpr primitive '{self.eqn.primitive.name}': {message}", self.b.loc)

    def tensor(self, x, dtype: DType, shape=None) -> Value:
        """`x` (a value or a number) cast to `dtype` and broadcast to `shape` (rank-0 literals broadcast)."""
        if not isinstance(x, Value):
            x = self.b.dim_size(dim=[x], dtype=dtype) if isinstance(x, SymExpr) else self.b.full(float(x), (), dtype)
        if x.type.dtype is not dtype:
            x = self.b.cast(x, dtype=dtype)
        if shape is not None and x.type.shape != tuple(shape):
            x = self.b.broadcast_to(x, shape=tuple(shape))
        return x

    def operands(self, xs, dtype: DType | None = None, shape=None) -> list[Value]:
        """Operands of an elementwise primitive at the result's shape (and `dtype`, default the first's)."""
        shape = self.out_type().shape if shape is None else shape
        dtype = dtype or xs[0].type.dtype
        return [self.tensor(x, dtype, shape) for x in xs]
