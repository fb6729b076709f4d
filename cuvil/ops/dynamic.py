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


def _nms_shape(ctx, types, a):
    boxes, scores, *limits = types
    if boxes.rank != 3 or scores.rank != 3 or boxes.shape[2] != 4 or not a["size"]:
        raise ctx.error(f"'non_max_suppression' needs boxes [batch, boxes, 4] and scores [batch, classes, boxes] and a "
                        f"'size' attribute, got {boxes} and {scores}")
    ctx.require_equal(boxes.shape[0], scores.shape[0], "'non_max_suppression' batches of boxes and scores")
    ctx.require_equal(boxes.shape[1], scores.shape[2], "'non_max_suppression' boxes of boxes and scores")
    for what, t, dtype in zip(("max_output_boxes_per_class", "iou_threshold", "score_threshold"), limits,
                              (DType.i64, boxes.dtype, boxes.dtype)):
        if t.numel != 1 or t.dtype is not dtype:
            raise ctx.error(f"'non_max_suppression' {what} must be one {dtype} value, got {t}")
    if boxes.dtype is not DType.f32 or scores.dtype is not DType.f32:
        raise ctx.error(f"'non_max_suppression' takes f32 boxes and scores, got {boxes} and {scores}")
    return [TensorType(DType.i64, (sym(a["size"]), 3))]


def _box_edges(box, center: bool) -> tuple:
    """(x_min, x_max, y_min, y_max) of a box [y1, x1, y2, x2] (corners in any order) or [xc, yc, w, h]."""
    if center:
        return box[0] - box[2] / 2, box[0] + box[2] / 2, box[1] - box[3] / 2, box[1] + box[3] / 2
    return min(box[1], box[3]), max(box[1], box[3]), min(box[0], box[2]), max(box[0], box[2])


def _overlaps(b1, b2, center: bool, threshold) -> bool:
    """ONNX's suppress_by_iou, in f32: the intersection over union exceeds the threshold."""
    x1, X1, y1, Y1 = _box_edges(b1, center)
    x2, X2, y2, Y2 = _box_edges(b2, center)
    iw, ih = min(X1, X2) - max(x1, x2), min(Y1, Y2) - max(y1, y2)
    if iw <= 0 or ih <= 0:
        return False
    inter, a1, a2 = iw * ih, (X1 - x1) * (Y1 - y1), (X2 - x2) * (Y2 - y2)
    union = a1 + a2 - inter
    return bool(inter > 0 and a1 > 0 and a2 > 0 and union > 0 and inter / union > threshold)


def _ref_nms(xs, a):
    boxes, scores = xs[0], xs[1]
    limit, iou, floor = max(int(xs[2].reshape(-1)[0]), 0), xs[3].reshape(-1)[0], xs[4].reshape(-1)[0]
    out = []
    for b, c in np.ndindex(scores.shape[:2]):
        s = scores[b, c]
        cand = [i for i in range(len(s)) if not a["score_threshold"] or s[i] > floor]
        cand.sort(key=lambda i: (-s[i], i))
        kept: list = []
        for i in cand:
            if len(kept) >= limit:
                break
            if not any(_overlaps(boxes[b, i], boxes[b, j], a["center_point_box"], iou) for j in kept):
                kept.append(i)
                out.append((b, c, i))
    return np.array(out, np.int64).reshape(-1, 3)


register_op("non_max_suppression", operands=5, shape=_nms_shape, reference=_ref_nms,
            attrs={"size": Attr("str", ""), "center_point_box": Attr("bool", False),
                   "score_threshold": Attr("bool", False)},
            sizes=lambda types, a: {a["size"]: types[1].numel},
            doc="ONNX NonMaxSuppression: (boxes, scores, max_output_boxes_per_class, iou_threshold, score_threshold) "
                "-> i64[size, 3] of (batch, class, box); score_threshold filters only when that attribute is set")


def _dynamic_slice_shape(ctx, types, a):
    start, end, *xs = types
    if any(t.numel != 1 or t.dtype is not DType.i64 for t in (start, end)) or not a["size"]:
        raise ctx.error(f"'dynamic_slice' takes one i64 start and one i64 end and a 'size' attribute, got {start} "
                        f"and {end}")
    axis, d = a["axis"], xs[0].shape[a["axis"]] if xs[0].rank > a["axis"] >= 0 else None
    if d is None or any(x.rank <= axis for x in xs):
        raise ctx.error(f"'dynamic_slice' axis {axis} is out of range for {', '.join(map(str, xs))}")
    for x in xs[1:]:
        ctx.require_equal(x.shape[axis], d, f"'dynamic_slice' operands' sizes along axis {axis}")
    return [x.with_shape(x.shape[:axis] + (sym(a["size"]),) + x.shape[axis + 1:]) for x in xs]


def slice_range(start: int, end: int, d: int, exact: bool, axis: int) -> tuple:
    """[start, end) of an axis of d: ONNX Slice's (negative from the end, clamped), or with `exact` both required in
    [0, d] (IndexError naming the first that is not)."""
    if exact:
        bad = next((i for i in (start, end) if not 0 <= i <= d), None)
        if bad is not None:
            raise IndexError(f"index {bad} is out of bounds for axis {axis} with size {d}")
        return start, max(start, end)
    start, end = (min(max(i + d if i < 0 else i, 0), d) for i in (start, end))
    return start, max(start, end)


def _ref_dynamic_slice(xs, a):
    start, end, *arrays = xs
    d = arrays[0].shape[a["axis"]]
    lo, hi = slice_range(int(start.reshape(-1)[0]), int(end.reshape(-1)[0]), d, a["exact"], a["axis"])
    return [np.take(x, np.arange(lo, hi), axis=a["axis"]) for x in arrays]


register_op("dynamic_slice", operands=(3, None), results=-1, shape=_dynamic_slice_shape, reference=_ref_dynamic_slice,
            attrs={"size": Attr("str", ""), "axis": Attr("int", 0), "exact": Attr("bool", False)},
            sizes=lambda types, a: {a["size"]: types[2].shape[a["axis"]]},
            doc="(start, end, x...) -> each x[start:end] along axis, bounds read at run time (ONNX Slice's "
                "clamping, or with exact both must lie in [0, d]); every result has the same size")
