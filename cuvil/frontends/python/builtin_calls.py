"""Python builtins inside compiled code: on Python values they run as Python; on tensors they mean what
they mean on a NumPy array or torch tensor (`len(x)` is its first size, `float(x)` a scalar)."""
from __future__ import annotations

import ast
import builtins

import numpy as np

from ...errors import UnsupportedError
from ...ir.dtypes import DType
from ...ir.symbolic import SymExpr
from . import emit as E
from .calls import item
from .values import TV, RuntimeRange, StackedList, is_dynamic, torch_module


def b_range(tr, *args):
    if not is_dynamic(args):
        return range(*args)
    start, stop, step = (0, args[0], 1) if len(args) == 1 else (*args, 1)[:3]
    if not isinstance(step, int) or step == 0:
        raise UnsupportedError("range() needs a non-zero step known at compile time")
    return RuntimeRange(start, stop, step)


def b_len(tr, x):
    if isinstance(x, StackedList):
        return x.length()
    if isinstance(x, TV):
        if x.rank == 0:
            raise UnsupportedError("len() of a 0-d tensor")
        return x.shape[0]
    return len(x)


def b_minmax(irop: str, fname: str, py):
    def conv(tr, *args, **kwargs):
        values = tr.iterate(args[0]) if len(args) == 1 else list(args)
        if not is_dynamic(values):
            return py(values, **kwargs)
        if kwargs:
            raise UnsupportedError(f"{py.__name__}() with key= or default= on tensors is not supported")
        out = values[0]
        for v in values[1:]:
            out = E.binary(tr.cx, irop, fname, out, v)
        return out
    return conv


def b_abs(tr, x):
    if isinstance(x, TV):
        return TV(tr.cx.b.abs(x.value), x.weak)
    return abs(x)


def b_number(dtype: DType, py):
    """float(x) / int(x) of a tensor: a weak scalar, as the Python number it would be."""
    def conv(tr, x=py()):
        if not isinstance(x, (TV, SymExpr)):
            return py(x)
        if isinstance(x, SymExpr) and py is int:
            return x
        t = item(tr.cx, x)
        return TV(E.to(tr.cx, t, dtype).value, weak=True)
    return conv


def b_bool(tr, x=False):
    return E.truth(tr.cx, x)


def b_sequence(py):
    def conv(tr, it=()):
        return py(tr.iterate(it))
    return conv


def b_enumerate(tr, it, start=0):
    return list(enumerate(tr.iterate(it), start))


def b_zip(tr, *its):
    return list(zip(*(tr.iterate(i) for i in its)))


def b_sum(tr, it, start=0):
    out = start
    for v in tr.iterate(it):
        out = tr.binop(ast.Add, out, v)
    return out


def b_reversed(tr, seq):
    return list(reversed(tr.iterate(seq)))


def b_isinstance(tr, obj, classinfo):
    if not isinstance(obj, TV):
        return isinstance(obj, classinfo)
    classes = classinfo if isinstance(classinfo, tuple) else (classinfo,)
    return any(c is np.ndarray if tr.cx.mode == "numpy" else _is_torch_tensor_class(c) for c in classes)


def _is_torch_tensor_class(c) -> bool:
    torch = torch_module()
    return torch is not None and isinstance(c, type) and issubclass(c, torch.Tensor)


def b_print(tr, *args, **kwargs):
    raise UnsupportedError("print() is not supported inside compiled code (values are not known at compile time); "
                           "use fallback='python' to debug, or cuvil.inspect_ir to see the program")


BUILTINS = {
    builtins.range: b_range, builtins.len: b_len, builtins.abs: b_abs,
    builtins.min: b_minmax("min", "minimum", builtins.min), builtins.max: b_minmax("max", "maximum", builtins.max),
    builtins.float: b_number(DType.f64, float), builtins.int: b_number(DType.i64, int), builtins.bool: b_bool,
    builtins.tuple: b_sequence(tuple), builtins.list: b_sequence(list), builtins.enumerate: b_enumerate,
    builtins.zip: b_zip, builtins.sum: b_sum, builtins.reversed: b_reversed, builtins.isinstance: b_isinstance,
    builtins.print: b_print, builtins.dict: lambda tr, *args, **kwargs: dict(*args, **kwargs),
}
