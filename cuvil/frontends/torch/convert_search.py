"""ATen searches in sorted sequences: `searchsorted` and `bucketize`, as PyTorch's own binary search unrolled.

Each of the ceil(log2(M + 1)) steps gathers the middle entry of every value's [lo, hi) range and halves it with
PyTorch's test (`!(entry >= value)` for the left side, `!(entry > value)` for the right), so the result equals
PyTorch's also where NaNs make the comparisons unordered; a range that has closed stays as it is.
"""
from __future__ import annotations

from ...ir.dtypes import DType
from .context import aten


def _insertion_points(cx, sequence, values, right: bool):
    """sequence [M] with values of any shape, or sequence [..., M] with values [..., K]: each value's insertion
    point, in the result dtype."""
    dtype = cx.promoted(sequence, values)
    seq, vals = cx.tensor(sequence, dtype), cx.tensor(values, dtype)
    m, shape = seq.type.shape[-1], vals.type.shape
    if not isinstance(m, int):
        raise cx.error("searching a sequence of symbolic length is not supported")
    lo, hi = cx.tensor(0, DType.i64, shape), cx.tensor(m, DType.i64, shape)
    one, last = cx.tensor(1, DType.i64, shape), cx.tensor(max(m - 1, 0), DType.i64, shape)
    for _ in range(m.bit_length()):
        mid = cx.b.add(lo, cx.b.div(cx.b.sub(hi, lo), cx.tensor(2, DType.i64, shape)))
        at = cx.b.min(mid, last)  # a closed range's mid may be m; it is not used then
        if seq.type.rank == 1:
            entry = cx.b.gather(seq, at, axis=0)
        else:
            entry = cx.b.gather_elements(seq, at, axis=seq.type.rank - 1)
        after = cx.b.emit("not", cx.b.gt(entry, vals) if right else cx.b.ge(entry, vals))
        open_ = cx.b.lt(lo, hi)
        lo = cx.b.where(cx.b.emit("and", open_, after), cx.b.add(mid, one), lo)
        hi = cx.b.where(cx.b.emit("and", open_, cx.b.emit("not", after)), mid, hi)
    return cx.tensor(lo, cx.out_dtype())


@aten("searchsorted")
def searchsorted(cx, sequence, values, out_int32=False, right=False, side=None, sorter=None):
    if sorter is not None:  # the insertion point in the sorted order
        sequence = cx.b.gather_elements(sequence, cx.tensor(sorter, DType.i64), axis=sequence.type.rank - 1)
    if not hasattr(values, "type"):  # a Python scalar
        values = cx.tensor(values, sequence.type.dtype, ())
    return _insertion_points(cx, sequence, values, bool(right) or side == "right")


@aten("bucketize")
def bucketize(cx, values, boundaries, out_int32=False, right=False):
    if not hasattr(values, "type"):
        values = cx.tensor(values, boundaries.type.dtype, ())
    return _insertion_points(cx, boundaries, values, bool(right))
