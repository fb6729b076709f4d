"""`tree_ensemble`: the sum over decision trees of the weights of the leaf each row of x reaches (ONNX-ML's
tree ensembles; their base values, averaging and post transforms are other ops around it).

The trees are one flattened node table: node j holds (feature, true successor, false successor, kind), where a
negative successor -k-1 is leaf k (a row of `weights`) and kind is the comparison (`MODES`) plus 8 when a NaN
feature goes to the true successor. `roots` holds per tree its first node (or leaf, negative) and its depth (the
most nodes a walk from it passes, so that compiled code can walk a fixed number of steps). The frontend checks
that the table is a forest (every walk ends in a leaf) and that features lie inside x.
"""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import DType
from .registry import register_op

MODES = ("BRANCH_LEQ", "BRANCH_LT", "BRANCH_GTE", "BRANCH_GT", "BRANCH_EQ", "BRANCH_NEQ")
MISSING_TRUE = 8
_COMPARE = (np.less_equal, np.less, np.greater_equal, np.greater, np.equal, np.not_equal)


def goes_true(kind, value, threshold):
    """Whether a node of `kind` sends `value` to its true successor (elementwise over arrays)."""
    out = np.zeros(np.shape(value), bool)
    for code, compare in enumerate(_COMPARE):
        out |= ((kind & 7) == code) & compare(value, threshold)
    return np.where(np.isnan(value), (kind & MISSING_TRUE) != 0, out)


def leaves(x, nodes, thresholds, roots) -> np.ndarray:
    """[rows, trees]: the leaf each row reaches in each tree."""
    rows = np.arange(x.shape[0])
    out = np.empty((x.shape[0], len(roots)), np.int64)
    for t, root in enumerate(roots[:, 0]):
        j = np.full(x.shape[0], root, np.int64)
        while (j >= 0).any():
            live = j >= 0
            n = nodes[j[live]]
            true = goes_true(n[:, 3], x[rows[live], n[:, 0]], thresholds[j[live]])
            j[live] = np.where(true, n[:, 1], n[:, 2])
        out[:, t] = -j - 1
    return out


def _ref_tree_ensemble(xs, attrs):
    x, nodes, thresholds, roots, weights = xs
    reached = leaves(x, nodes, thresholds, roots)
    return weights[reached].sum(axis=1, dtype=weights.dtype) if len(roots) else \
        np.zeros((x.shape[0], weights.shape[1]), weights.dtype)


def _tree_ensemble_shape(ctx, types, attrs):
    x, nodes, thresholds, roots, weights = types
    if x.rank != 2 or x.dtype not in (DType.f32, DType.f64):
        raise ctx.error(f"'tree_ensemble' needs a [rows, features] f32 or f64 x, got {x}")
    if nodes.rank != 2 or nodes.shape[1] != 4 or nodes.dtype is not DType.i64:
        raise ctx.error(f"'tree_ensemble' nodes must be i64 [n, 4] (feature, true, false, kind), got {nodes}")
    if thresholds.rank != 1 or thresholds.dtype is not x.dtype:
        raise ctx.error(f"'tree_ensemble' thresholds must be one {x.dtype.value} per node, got {thresholds}")
    ctx.require_equal(thresholds.shape[0], nodes.shape[0], "'tree_ensemble' thresholds per node")
    if roots.rank != 2 or roots.shape[1] != 2 or roots.dtype is not DType.i64:
        raise ctx.error(f"'tree_ensemble' roots must be i64 [trees, 2] (first node, depth), got {roots}")
    if weights.rank != 2 or weights.dtype not in (DType.f32, DType.f64):
        raise ctx.error(f"'tree_ensemble' weights must be f32 or f64 [leaves, targets], got {weights}")
    return [weights.with_shape((x.shape[0], weights.shape[1]))]


register_op("tree_ensemble", operands=5, shape=_tree_ensemble_shape, reference=_ref_tree_ensemble,
            doc="per row of x, the sum over trees of the weights of the leaf reached (operands: x, nodes, "
                "thresholds, roots, weights)")
