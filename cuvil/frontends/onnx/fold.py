"""Shape arithmetic at conversion time: folders for arithmetic on known values that hold symbolic sizes.

Exported models compute shapes at run time (Shape -> Gather -> Mul -> Concat -> Reshape). With symbolic
input sizes those values are object arrays of ints and `SymExpr`s; the folders here evaluate them where the
answer does not depend on the sizes' values, and decline (return None) otherwise. Known values without
symbols are folded by running the node's own converter on constants (`GraphConverter.fold_concrete`).
"""
from __future__ import annotations

import numpy as np
from onnx import TensorProto

from ...ir.symbolic import SymExpr
from .registry import folder
from .tensors import Tensor, ir_dtype


FOLD_LIMIT = 4096  # known values up to this many elements are folded at conversion time


class CannotFold(Exception):
    """The result depends on the values of symbolic sizes."""


def has_symbols(arr) -> bool:
    return arr is not None and arr.dtype == object


def tidy(arr, elem: int) -> Tensor:
    """A known Tensor; an object array whose symbols all cancelled becomes a plain array of the element type."""
    arr = np.asarray(arr)
    if arr.dtype == object and not any(isinstance(v, SymExpr) for v in arr.reshape(-1)):
        arr = np.array(arr.tolist(), dtype=np.int64).reshape(arr.shape).astype(ir_dtype(elem).numpy)
    return Tensor(known=arr, elem=elem)


def dims_tensor(dims) -> Tensor:
    """A shape (ints and symbolic dims) as a known INT64 tensor."""
    return tidy(np.array(list(dims) or [], dtype=object).reshape(len(dims)), TensorProto.INT64)


def symbolic_inputs(ctx, lo: int = 0) -> list | None:
    """The known inputs from `lo` on when all are known and at least one holds symbols, else None."""
    ks = [ctx.known(i) for i in range(lo, len(ctx.inputs)) if ctx.has(i)]
    if any(k is None for k in ks) or not any(has_symbols(k) for k in ks):
        return None
    return [k.astype(object) for k in ks]


def _elementwise(fn, result_elem=None):
    """A folder applying `fn` elementwise to object arrays (broadcasting as ONNX does)."""
    def fold(ctx):
        ks = symbolic_inputs(ctx)
        if ks is None:
            return None
        try:
            out = np.frompyfunc(fn, len(ks), 1)(*ks)
        except (CannotFold, TypeError, ValueError):
            return None
        return [tidy(np.asarray(out, dtype=object), result_elem or ctx.tensor(0).elem)]
    return fold


def _div(x, y):
    if isinstance(x, int) and isinstance(y, int):
        if y == 0:
            raise CannotFold
        q = abs(x) // abs(y)
        return q if (x >= 0) == (y > 0) else -q
    if isinstance(y, int) and y > 0:  # sizes are non-negative, so floor and truncation agree
        return x // y
    if isinstance(y, SymExpr) and x == y:
        return 1
    raise CannotFold


def nonnegative(d) -> bool:
    """A size expression whose terms all have positive coefficients (sums and products of sizes)."""
    return isinstance(d, int) and d >= 0 or isinstance(d, SymExpr) and all(c > 0 for _, c in d.terms)


def _equal(x, y):
    if x == y:
        return True
    if isinstance(x, int) and isinstance(y, int):
        return False
    if nonnegative(x) and isinstance(y, int) and y < 0 or nonnegative(y) and isinstance(x, int) and x < 0:
        return False
    raise CannotFold


def _max(x, y):
    if x == y or (isinstance(x, int) and isinstance(y, int)):
        return max(x, y)
    if isinstance(y, int) and y <= 0 and nonnegative(x) or isinstance(x, int) and x <= 0 and nonnegative(y):
        return x if isinstance(y, int) else y
    raise CannotFold


def _min(x, y):
    if x == y or (isinstance(x, int) and isinstance(y, int)):
        return min(x, y)
    raise CannotFold


def _mod(x, y, floor: bool = True):
    """x mod y for a divisor y > 0 and x >= 0 (where Mod's fmod flag does not matter): by a constant, or a
    constant below every value the size y can take (torch.roll's shift on a dynamic axis: 3 % (8*s) = 3).
    Floor mod (fmod=0) also takes a constant -y <= x < 0 to y + x (a roll by -3 slices at (-3) % n = n - 3)."""
    if isinstance(x, int) and isinstance(y, int) and x >= 0 and y > 0:
        return x % y
    if isinstance(y, int) and y > 0 and nonnegative(x):
        return x % y
    if isinstance(x, int) and nonnegative(y) and 0 <= x < _least(y):
        return x
    if floor and isinstance(x, int) and nonnegative(y) and 0 < -x <= _least(y):
        return y + x
    raise CannotFold


def _least(d: SymExpr) -> int:
    """A lower bound of a size with positive coefficients: every symbol at least 1, // and % atoms at least 0."""
    return sum(c * all(isinstance(a, str) for a in m) for m, c in d.terms)


folder("Add")(_elementwise(lambda x, y: x + y))
folder("Sub")(_elementwise(lambda x, y: x - y))
folder("Mul")(_elementwise(lambda x, y: x * y))
folder("Div")(_elementwise(_div))
folder("Neg")(_elementwise(lambda x: -x))
folder("Equal")(_elementwise(_equal, TensorProto.BOOL))
folder("Max")(_elementwise(_max))
folder("Min")(_elementwise(_min))



@folder("Mod")
def mod(ctx):
    return _elementwise(lambda x, y: _mod(x, y, floor=not ctx.attr("fmod", 0)))(ctx)

@folder("Where")
def where(ctx):
    ks = [ctx.known(i) for i in range(3)]
    if any(k is None for k in ks) or not any(has_symbols(k) for k in ks[1:]) or has_symbols(ks[0]):
        return None
    return [tidy(np.where(ks[0], ks[1].astype(object), ks[2].astype(object)), ctx.tensor(1).elem)]


@folder("Cast")
def cast(ctx):
    k = ctx.known(0)
    to = ctx.attr("to")
    if not has_symbols(k) or to in (TensorProto.BOOL, TensorProto.STRING):
        return None
    return [Tensor(known=k, elem=to)]


@folder("ReduceProd", "ReduceSum")
def reduce_all(ctx):
    """A product or sum over a whole 1-D shape vector (the element count of a tensor), axes unspecified."""
    k = ctx.known(0)
    if not has_symbols(k) or k.ndim != 1 or len(ctx.inputs) > 1 or ctx.has_attr("axes"):
        return None
    total = k.sum() if ctx.op_type == "ReduceSum" else np.prod(k)
    keep = ctx.attr("keepdims", 1)
    return [tidy(np.array([total] if keep else total, dtype=object), ctx.tensor(0).elem)]
