"""Lowerings that loop-kernel backends want before fusion."""
from __future__ import annotations

from ..ir.core import Function
from .manager import Pass
from .rewrite import replace_op


class SplitToSlices(Pass):
    """`split` becomes one `slice` per piece, so each piece can fuse into its consumers."""

    name = "split-to-slices"

    def run_on_operation(self, fn: Function) -> bool:
        from ..ir.builder import Builder
        from ..ir.core import Region

        changed = False
        for op in list(fn.walk()):
            if op.name != "split" or op.parent is None:
                continue
            b = Builder(fn.module, fn, Region(), op.loc)
            x, axis, start, pieces = op.operands[0], op.attrs["axis"], 0, []
            for size in op.attrs["sizes"]:
                pieces.append(b.slice(x, starts=(start,), ends=(start + size,), axes=(axis,), steps=(1,)))
                start = start + size
            replace_op(fn, op, b.region.ops, pieces)
            changed = True
        return changed
