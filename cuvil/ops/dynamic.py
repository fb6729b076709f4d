"""Ops whose result size depends on the data: each defines a size symbol (its `size` attribute, like torch's
unbacked `u0`) whose value the op computes at run time, with an upper bound from its operands' sizes that the
memory plan allocates for; later ops read the run-time value (see cuvil/ir/dynamic.py)."""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import DType
from ..ir.symbolic import sym
from ..ir.types import TensorType
from .common import norm_axis
from .registry import Attr, register_op


def _nonzero_shape(ctx, types, a):
    (x,) = types
    if x.rank == 0:
        raise ctx.error("'nonzero' needs an operand of rank 1 or more, got a scalar (reshape it to [1])")
    if not a["size"]:
        raise ctx.error("'nonzero' needs a 'size' attribute naming the size symbol it defines")
    return [TensorType(DType.i64, (x.rank, sym(a["size"])))]


register_op("nonzero", shape=_nonzero_shape, attrs={"size": Attr("str", "")},
            sizes=lambda types, a: {a["size"]: types[0].numel},
            reference=lambda xs, a: np.array(np.nonzero(xs[0]), dtype=np.int64).reshape(xs[0].ndim, -1),
            doc="the indices of the nonzero elements, i64[rank, size] in row-major order (ONNX NonZero); "
                "size is at most the element count")


def _unique_shape(ctx, types, a):
    (x,) = types
    if x.rank == 0 or not a["size"]:
        raise ctx.error("'unique' needs an operand of rank 1 or more and a 'size' attribute naming its count")
    u, d = sym(a["size"]), x.shape[a["axis"]]
    values = x.with_shape(x.shape[:a["axis"]] + (u,) + x.shape[a["axis"] + 1:])
    return [values, TensorType(DType.i64, (u,)), TensorType(DType.i64, (d,)), TensorType(DType.i64, (u,))]


def _slice_groups(rows: np.ndarray) -> tuple:
    """(the stable lexicographic order of rows, a bool per sorted position: it starts a new group); NaNs sort last
    and equal each other."""
    keys = rows.astype(np.float64) if rows.dtype.kind not in "biu" else rows
    order = np.lexsort(keys.T[::-1]) if keys.shape[1] else np.arange(len(keys))
    k = keys[order]
    same = (k[1:] == k[:-1]) | (np.isnan(k[1:]) & np.isnan(k[:-1]) if k.dtype.kind == "f" else False)
    return order, np.concatenate([[True], ~np.all(same, axis=1)]) if len(k) else np.zeros(0, bool)


def _ref_unique(xs, a):
    """ONNX Unique along `axis`: the distinct slices (sorted, or in order of first occurrence), the index of each
    one's first occurrence, each slice's group, and the group sizes."""
    x, axis = xs[0], a["axis"]
    d = x.shape[axis]
    rows = np.moveaxis(x, axis, 0)
    order, starts = _slice_groups(rows.reshape(d, rows[0].size if d else 0))
    group = np.cumsum(starts) - 1
    first = order[starts]
    counts = np.diff(np.append(np.flatnonzero(starts), d))
    if not a["sorted"]:
        by_first = np.argsort(first, kind="stable")
        renumber = np.empty_like(by_first)
        renumber[by_first] = np.arange(len(by_first))
        first, counts, group = first[by_first], counts[by_first], renumber[group]
    inverse = np.empty(d, np.int64)
    inverse[order] = group
    return [np.take(x, first, axis=axis), first.astype(np.int64), inverse, counts.astype(np.int64)]


register_op("unique", results=4, shape=_unique_shape, reference=_ref_unique,
            normalize=lambda types, a: {**a, "axis": norm_axis(a["axis"], types[0].rank, "unique")},
            attrs={"size": Attr("str", ""), "axis": Attr("int", 0), "sorted": Attr("bool", True)},
            sizes=lambda types, a: {a["size"]: types[0].shape[a["axis"]]},
            doc="ONNX Unique along axis: the distinct slices Y, the first index of each, each slice's index in Y, "
                "and the counts; size (the count of distinct slices) is at most the axis length")
