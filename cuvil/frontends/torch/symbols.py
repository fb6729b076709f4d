"""PyTorch's symbolic sizes (SymInts over sympy) as Cuvil dimensions (`SymExpr`).

`torch.export.Dim("batch")` becomes a sympy symbol such as `s77`; the walker renames it to the Dim's name so
the IR reads `f32[batch,3,224,224]`. Sizes derived from it (`2*s77`, `s77//2`) map term by term.

An input size given only as a multiple (`2 * Dim("_h")`, what export suggests for a UNet's even heights) gets a
symbol of its own, `_h_x2`, which a call binds; the root becomes `_h_x2//2` wherever it appears, and the
function requires `_h_x2 == 2*(_h_x2//2)`.
"""
from __future__ import annotations

from typing import NamedTuple

import sympy
import torch
from torch.utils._sympy.functions import CleanDiv, FloorDiv, Mod, PythonMod

from ...errors import UnsupportedError
from ...ir.symbolic import Dim, grows_with, is_nonnegative, substitute, sym


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
        if e.name.startswith("u") and e.name not in names:
            raise UnsupportedError(f"the size {e.name} depends on tensor values in a way Cuvil does not follow "
                                   f"(data-dependent sizes from .item() are not supported; those of nonzero, "
                                   f"masked_select and boolean masks are)")
        target = names.get(e.name, e.name)
        return sym(target.name) // target.factor if isinstance(target, Multiple) else sym(target)
    multiple = _multiple_of(e, names)
    if multiple is not None:
        return multiple
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


def implied_by_bounds(expr, names: dict, bounds: dict) -> bool:
    """Whether the size check `expr` (a sympy relation PyTorch asserts at run time, such as `u0 <= 15` for a
    nonzero's count) holds for every value of the data-dependent sizes from 0 up to their `bounds`."""
    kinds = {sympy.GreaterThan: (0, 1, 0), sympy.StrictGreaterThan: (0, 1, 1), sympy.LessThan: (1, 0, 0),
             sympy.StrictLessThan: (1, 0, 1)}
    if type(expr) not in kinds:
        return False
    big, small, strict = kinds[type(expr)]
    gap = _convert(expr.args[big], names) - _convert(expr.args[small], names) - strict  # must be >= 0
    if is_nonnegative(gap):
        return True
    return grows_with(-gap, bounds) and is_nonnegative(substitute(gap, bounds))  # smallest at the bounds


class Multiple(NamedTuple):
    """A root symbol seen only as `factor * root` in input sizes: the input size is the symbol `name`."""
    name: str
    factor: int


def _multiple_of(e, names: dict):
    """`k * root` for a root named by a `Multiple` whose factor divides k, as a multiple of its symbol."""
    if not (isinstance(e, sympy.Mul) and len(e.args) == 2 and e.args[0].is_Integer and e.args[1].is_Symbol):
        return None
    target, k = names.get(e.args[1].name), int(e.args[0])
    if isinstance(target, Multiple) and k % target.factor == 0:
        return sym(target.name) * (k // target.factor)
    return None


def dim_names(program, dynamic_shapes, arg_names: list) -> dict:
    """sympy symbol name -> the name of the `torch.export.Dim` the user gave for it, or a `Multiple`."""
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
            elif isinstance(size, torch.SymInt) and size.node.expr.is_Symbol and dim is torch.export.Dim.AUTO:
                out.setdefault(size.node.expr.name, f"{node.target}_{axis}")  # `dynamic=True`: x_0 for x's axis 0
    return _multiples(program, specs, out)


def _multiples(program, specs: dict, names: dict) -> dict:
    """Give each root that input sizes show only as `k * root` (one k per root) a `Multiple`."""
    sizes = [(node.target, axis, d.node.expr) for node in program.graph.nodes if node.op == "placeholder"
             and isinstance(node.meta.get("val"), torch.Tensor)
             for axis, d in enumerate(node.meta["val"].shape) if isinstance(d, torch.SymInt)]
    plain = {e.name for _, _, e in sizes if e.is_Symbol}
    for target, axis, e in sizes:
        if isinstance(e, sympy.Mul) and len(e.args) == 2 and e.args[0].is_Integer and e.args[1].is_Symbol \
                and e.args[1].name not in plain and e.args[1].name not in names:
            root = getattr(getattr(_spec_dim(specs, target, axis), "root", None), "__name__", e.args[1].name)
            names[e.args[1].name] = Multiple(f"{root}_x{int(e.args[0])}", int(e.args[0]))
    return names


def _spec_dim(specs: dict, target, axis: int):
    spec = specs.get(target)
    spec = dict(enumerate(spec)) if isinstance(spec, (list, tuple)) else spec
    return spec.get(axis) if isinstance(spec, dict) else None
