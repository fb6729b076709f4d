"""PyTorch's symbolic sizes (SymInts over sympy) as Cuvil dimensions (`SymExpr`).

`torch.export.Dim("batch")` becomes a sympy symbol such as `s77`; the walker renames it to the Dim's name so
the IR reads `f32[batch,3,224,224]`. Sizes derived from it (`2*s77`, `s77//2`) map term by term.
"""
from __future__ import annotations

import sympy
import torch
from torch.utils._sympy.functions import CleanDiv, FloorDiv, Mod, PythonMod

from ...errors import UnsupportedError
from ...ir.symbolic import Dim, sym


def to_dim(value, names: dict) -> Dim:
    """An int, a SymInt or a sympy expression as a dimension; `names` renames sympy symbols."""
    if isinstance(value, torch.SymInt):
        value = value.node.expr
    if isinstance(value, int):
        return value
    return _convert(sympy.sympify(value), names)


def _convert(e, names: dict) -> Dim:
    if e.is_Integer:
        return int(e)
    if e.is_Symbol:
        if e.name.startswith("u"):
            raise UnsupportedError(f"the size {e.name} depends on tensor values (data-dependent shapes such as "
                                   f"nonzero or .item() sizes are not supported)")
        return sym(names.get(e.name, e.name))
    args = [_convert(a, names) for a in e.args]
    if isinstance(e, sympy.Add):
        return sum(args[1:], start=args[0])
    if isinstance(e, sympy.Mul):
        out = args[0]
        for a in args[1:]:
            out = out * a
        return out
    if isinstance(e, sympy.Pow) and isinstance(args[1], int) and args[1] >= 0:
        out: Dim = 1
        for _ in range(args[1]):
            out = out * args[0]
        return out
    if isinstance(e, (FloorDiv, CleanDiv)) and isinstance(args[1], int):
        return args[0] // args[1]
    if isinstance(e, (Mod, PythonMod)) and isinstance(args[1], int):
        return args[0] % args[1]
    raise UnsupportedError(f"the symbolic size {e} ({type(e).__name__}) has no Cuvil equivalent")


def dim_names(program, dynamic_shapes, arg_names: list) -> dict:
    """sympy symbol name -> the name of the `torch.export.Dim` the user gave for it."""
    if not dynamic_shapes:
        return {}
    specs = dynamic_shapes if isinstance(dynamic_shapes, dict) else dict(zip(arg_names, dynamic_shapes))
    out = {}
    for node in program.graph.nodes:
        spec = specs.get(node.target) if node.op == "placeholder" else None
        spec = dict(enumerate(spec)) if isinstance(spec, (list, tuple)) else spec
        if not isinstance(spec, dict) or not isinstance(node.meta.get("val"), torch.Tensor):
            continue
        for axis, dim in spec.items():
            size = node.meta["val"].shape[axis]
            name = getattr(dim, "__name__", None)
            if isinstance(size, torch.SymInt) and size.node.expr.is_Symbol and isinstance(name, str) \
                    and name.isidentifier():
                out[size.node.expr.name] = name
    return out
