"""Which values of a planned function own a buffer: what the C backends' memory plans (passes/memory.py) cover."""
from __future__ import annotations

from ...ir.core import Op, Value


def is_alias(op: Op) -> bool:
    """A fused group that only reshapes its input is a view: it shares the input's buffer."""
    body = op.regions[0].ops if op.name == "fused" else []
    return len(body) == 2 and body[0].name == "reshape" and body[0].operands[0] is op.regions[0].args[0]


def nbytes(v: Value):
    return v.type.numel * v.type.dtype.itemsize


def defines_buffer(v: Value) -> bool:
    """Results of kernels, library ops and control flow own buffers; inputs, constants and views do not."""
    op = v.owner
    return isinstance(op, Op) and op.name not in ("constant",) and not (op.name == "fused" and is_alias(op))
