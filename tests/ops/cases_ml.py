"""Cases for `tree_ensemble`, against a walk written out node by node (independent of the vectorised reference)."""
import numpy as np

from .cases import Case

# Two trees over 3 features: node (feature, true, false, kind); successor -k-1 is leaf k; kind 8 = NaN goes true.
NODES = np.int64([[0, 1, -1, 0 | 8], [1, -2, -3, 3], [2, -4, 3, 4], [0, -5, -6, 5]])
THRESHOLDS = np.float32([0.1, -0.3, 0.5, 1.0])
ROOTS = np.int64([[0, 2], [2, 2]])  # (first node, depth)
WEIGHTS = np.float32([[1, 0], [2, 1], [3, -1], [10, 5], [20, 0], [30, 7]])


def _walk(xs):
    x, nodes, thresholds, roots, weights = xs
    compare = [np.less_equal, np.less, np.greater_equal, np.greater, np.equal, np.not_equal]
    out = np.zeros((x.shape[0], weights.shape[1]), weights.dtype)
    for r in range(x.shape[0]):
        for j in roots[:, 0]:
            while j >= 0:
                f, t, e, kind = nodes[j]
                v = x[r, f]
                go = bool(kind & 8) if np.isnan(v) else bool(compare[kind & 7](v, thresholds[j]))
                j = t if go else e
            out[r] += weights[-j - 1]
    return [out]


def _x(dtype):
    x = np.random.default_rng(0).standard_normal((9, 3)).astype(dtype)
    x[::3, 0] = np.nan
    x[1::4, 2] = 0.5
    x[2, 0] = 1.0
    return x


CASES = [
    Case("tree_ensemble", [_x(np.float32), NODES, THRESHOLDS, ROOTS, WEIGHTS], expected=_walk, id="f32"),
    Case("tree_ensemble", [_x(np.float64), NODES, THRESHOLDS.astype(np.float64), ROOTS, WEIGHTS.astype(np.float64)],
         expected=_walk, id="f64"),
    Case("tree_ensemble", [_x(np.float32)[:0], NODES, THRESHOLDS, ROOTS, WEIGHTS], expected=_walk, id="no-rows"),
    Case("tree_ensemble", [_x(np.float32), NODES, THRESHOLDS, np.int64([[-3, 0], [2, 2]]), WEIGHTS], expected=_walk,
         id="leaf-root"),
]
