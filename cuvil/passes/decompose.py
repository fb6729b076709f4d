"""Rewrite composite ops into primitives through the decompositions declared in the registry."""
from __future__ import annotations

from typing import Callable, Optional

from ..ir.builder import Builder
from ..ir.core import Function, Module, Region
from ..ops import registry


def decompose(module: Module, should_decompose: Optional[Callable[[str], bool]] = None) -> bool:
    """Replace every composite op (or those `should_decompose(name)` selects) until none is left.

    Returns whether anything changed. Decompositions may produce other composites; they are expanded too.
    """
    select = should_decompose or (lambda name: True)
    changed = False
    for fn in module.functions.values():
        while _decompose_once(module, fn, select):
            changed = True
    return changed


def _decompose_once(module: Module, fn: Function, select) -> bool:
    for op in list(fn.walk()):
        opdef = registry.get_op(op.name)
        if opdef.decompose is None or not select(op.name):
            continue
        scratch = Region()
        b = Builder(module, fn, scratch, op.loc)
        out = opdef.decompose(b, list(op.operands), dict(op.attrs))
        out = list(out) if isinstance(out, (list, tuple)) else [out]
        region: Region = op.parent
        at = region.ops.index(op)
        for new in scratch.ops:
            new.parent = region
        region.ops[at:at + 1] = scratch.ops
        fn.replace_uses({id(r): v for r, v in zip(op.results, out)})
        return True
    return False
