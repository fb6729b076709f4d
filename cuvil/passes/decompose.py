"""Rewrite composite ops into primitives through the decompositions declared in the registry."""
from __future__ import annotations

from typing import Callable, Optional

from ..errors import VerificationError
from ..ir.builder import Builder
from ..ir.core import Function, Module, Op, Region
from ..ops import registry
from .rewrite import replace_op


def decompose(module: Module, should_decompose: Optional[Callable[[Op], bool]] = None) -> bool:
    """Replace every composite op (or those `should_decompose(op)` selects) until none is left.

    Returns whether anything changed. Decompositions may produce other composites; they are expanded too.
    """
    changed = False
    for fn in module.functions.values():
        changed |= decompose_function(fn, should_decompose)
    return changed


def decompose_function(fn: Function, should_decompose: Optional[Callable[[Op], bool]] = None) -> bool:
    select = should_decompose or (lambda op: True)
    changed = False
    while _decompose_once(fn.module, fn, select):
        changed = True
    return changed


def _decompose_once(module: Module, fn: Function, select) -> bool:
    for op in list(fn.walk()):
        opdef = registry.get_op(op.name)
        if opdef.decompose is None or not select(op):
            continue
        scratch = Region()
        b = Builder(module, fn, scratch, op.loc)
        out = opdef.decompose(b, list(op.operands), dict(op.attrs))
        out = list(out) if isinstance(out, (list, tuple)) else [out]
        got, want = [v.type for v in out], [r.type for r in op.results]
        if got != want:
            raise VerificationError(f"decomposition of '{op.name}' gives ({', '.join(map(str, got))}), "
                                    f"expected ({', '.join(map(str, want))})", op.loc)
        replace_op(fn, op, scratch.ops, out)
        return True
    return False
