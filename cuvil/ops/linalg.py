"""Linear algebra on batches of square matrices: `det`, `slogdet`, `lu_factor`, `inv`, `solve`, `cholesky`, and
`lu_permutation`, the row order that `lu_factor`'s pivots stand for.

Each op takes [..., n, n] matrices (the leading axes are a batch) of a float type and computes in float64. The C
kernels (backends/cpu/library_linalg.py) factor with partial pivoting in LAPACK getf2's order, so values and pivots
agree with LAPACK's to rounding. `lu_factor`, `inv`, `solve` and `cholesky` also give LAPACK's `info` per matrix (i32:
0, or 1 + the first column whose pivot is exactly zero / whose leading minor is not positive definite). A matrix that
cannot be factored has a determinant of 0 (`slogdet`: sign 0, log -inf) and NaN in its whole `inv`, `solve` or
`cholesky` result: a compiled call has no per-matrix error channel, and NaN cannot be taken for a value.
"""
from __future__ import annotations

import numpy as np

from ..ir.dtypes import DType
from ..ir.types import TensorType
from .common import require_dtype
from .registry import Attr, register_op


def _square(ctx, t, name: str) -> None:
    """A [..., n, n] operand of a float type."""
    require_dtype(ctx, t, lambda d: d.is_float, name)
    if t.rank < 2:
        raise ctx.error(f"'{name}' needs a matrix or a batch of them ([..., n, n]), got {t}")
    ctx.require_equal(t.shape[-2], t.shape[-1], f"'{name}' matrix rows and columns")


def _info(t) -> TensorType:
    return TensorType(DType.i32, t.shape[:-2])


def _det_shape(name: str, results: int):
    def shape(ctx, types, attrs):
        _square(ctx, types[0], name)
        return [types[0].with_shape(types[0].shape[:-2])] * results
    return shape


def _factor_shape(name: str):
    def shape(ctx, types, attrs):
        _square(ctx, types[0], name)
        return [types[0], _info(types[0])]
    return shape


def _lu_shape(ctx, types, attrs):
    """Any [..., m, n]: pivots for the first min(m, n) rows."""
    t = types[0]
    require_dtype(ctx, t, lambda d: d.is_float, "lu_factor")
    if t.rank < 2:
        raise ctx.error(f"'lu_factor' needs a matrix or a batch of them ([..., m, n]), got {t}")
    m, n = t.shape[-2:]
    if not (isinstance(m, int) and isinstance(n, int)) and m != n:
        raise ctx.error(f"'lu_factor' of {t}: a non-square matrix needs static sizes")
    return [t, TensorType(DType.i32, t.shape[:-2] + (min(m, n) if m != n else m,)), _info(t)]


def _solve_shape(ctx, types, attrs):
    a, b = types
    _square(ctx, a, "solve")
    if b.dtype is not a.dtype or b.rank != a.rank:
        raise ctx.error(f"'solve' right-hand side must be [..., n, k] of the matrix's batch and type, got {a} and {b} "
                        "(insert broadcast_to / cast)")
    for i, (x, y) in enumerate(zip(a.shape[:-1], b.shape[:-1])):
        ctx.require_equal(x, y, f"'solve' operand dimension {i}")
    return [b, _info(a)]


def _lu(m):
    """LAPACK getf2 in NumPy: (packed LU, 0-based pivot rows, info, permutation sign) of one float64 m x n matrix."""
    a = m.copy()
    piv, info, sign = np.arange(min(m.shape)), 0, 1.0
    for j in range(min(m.shape)):
        p = j + int(np.argmax(np.abs(a[j:, j])))
        piv[j] = p
        if a[p, j] == 0:
            info = info or j + 1
            continue
        if p != j:
            a[[j, p]] = a[[p, j]]
            sign = -sign
        a[j + 1:, j] /= a[j, j]
        a[j + 1:, j + 1:] -= np.outer(a[j + 1:, j], a[j, j + 1:])
    return a, piv, info, sign


def _cholesky(m):
    """(L, info) of one float64 matrix, reading its lower half; L is NaN where info is not 0."""
    n = m.shape[0]
    low = np.zeros_like(m)
    for j in range(n):
        s = m[j, j] - low[j, :j] @ low[j, :j]
        if not s > 0:
            return np.full_like(m, np.nan), j + 1
        low[j, j] = np.sqrt(s)
        low[j + 1:, j] = (m[j + 1:, j] - low[j + 1:, :j] @ low[j, :j]) / low[j, j]
    return low, 0


def _matrices(x):
    x = np.asarray(x, np.float64)
    return x.reshape((int(np.prod(x.shape[:-2])),) + x.shape[-2:])


def _ref_det(xs, a):
    x = xs[0]
    dets = [sign * np.prod(np.diag(lu)) if not info else 0.0 for lu, _, info, sign in map(_lu, _matrices(x))]
    return np.asarray(dets, np.float64).reshape(x.shape[:-2]).astype(x.dtype)


def _ref_slogdet(xs, a):
    x = xs[0]
    signs, logs = [], []
    for lu, _, info, sign in map(_lu, _matrices(x)):
        d = np.diag(lu)
        signs.append(0.0 if info else sign * np.prod(np.sign(d)))
        logs.append(-np.inf if info else np.sum(np.log(np.abs(d))))
    return [np.asarray(v, np.float64).reshape(x.shape[:-2]).astype(x.dtype) for v in (signs, logs)]


def _ref_lu_factor(xs, a):
    x = xs[0]
    parts = list(map(_lu, _matrices(x)))
    lu = np.asarray([p[0] for p in parts], np.float64).reshape(x.shape).astype(x.dtype)
    piv = np.asarray([p[1] + 1 for p in parts], np.int32).reshape(x.shape[:-2] + (min(x.shape[-2:]),))
    return [lu, piv, np.asarray([p[2] for p in parts], np.int32).reshape(x.shape[:-2])]


def _lu_solve(m, r):
    """(X, info) of one system: NaN where the matrix is singular."""
    lu, piv, info, _ = _lu(m)
    if info:
        return np.full_like(r, np.nan), info
    r = r.copy()
    for j, p in enumerate(piv):
        r[[j, p]] = r[[p, j]]
    n = m.shape[0]
    for i in range(n):
        r[i] -= lu[i, :i] @ r[:i]
    for i in reversed(range(n)):
        r[i] = (r[i] - lu[i, i + 1:] @ r[i + 1:]) / lu[i, i]
    return r, info


def _ref_solve(xs, a):
    x, b = xs
    parts = [_lu_solve(m, r) for m, r in zip(_matrices(x), _matrices(b))]
    out = np.asarray([p[0] for p in parts], np.float64).reshape(b.shape).astype(b.dtype)
    return [out, np.asarray([p[1] for p in parts], np.int32).reshape(x.shape[:-2])]


def _ref_inv(xs, a):
    x = xs[0]
    eye = np.broadcast_to(np.eye(x.shape[-1], dtype=x.dtype), x.shape)
    return _ref_solve([x, eye], a)


def _ref_cholesky(xs, a):
    x = xs[0]
    parts = list(map(_cholesky, _matrices(x)))
    low = np.asarray([p[0] for p in parts], np.float64).reshape(x.shape)
    out = np.swapaxes(low, -1, -2) if a["upper"] else low
    return [out.astype(x.dtype), np.asarray([p[1] for p in parts], np.int32).reshape(x.shape[:-2])]


def _permutation_shape(ctx, types, attrs):
    t, rows = types[0], attrs["rows"]
    require_dtype(ctx, t, lambda d: d in (DType.i32, DType.i64), "lu_permutation")
    if t.rank < 1 or not isinstance(t.shape[-1], int) or t.shape[-1] > rows:
        raise ctx.error(f"'lu_permutation' needs [..., k] pivots with a static k <= rows={rows}, got {t}")
    return [TensorType(DType.i64, t.shape[:-1] + (rows,))]


def _ref_permutation(xs, a):
    """perm with A[perm] = L U: the identity order with row j swapped for row pivots[j] - 1, j = 0, 1, ..."""
    piv = np.asarray(xs[0], np.int64)
    flat = piv.reshape((int(np.prod(piv.shape[:-1])), piv.shape[-1]))
    out = np.tile(np.arange(a["rows"], dtype=np.int64), (flat.shape[0], 1))
    for perm, rows in zip(out, flat):
        for j, p in enumerate(rows):
            if not 1 <= p <= a["rows"]:
                raise IndexError(f"index {p - 1} is out of bounds for axis -1 with size {a['rows']}")  # 1-based pivot
            perm[[j, p - 1]] = perm[[p - 1, j]]
    return out.reshape(piv.shape[:-1] + (a["rows"],))


register_op("det", shape=_det_shape("det", 1), reference=_ref_det, doc="determinant of each [..., n, n] matrix")
register_op("slogdet", results=2, shape=_det_shape("slogdet", 2), reference=_ref_slogdet,
            doc="sign and log |det| of each matrix: a determinant that would overflow or underflow stays exact")
register_op("lu_factor", results=3, shape=_lu_shape, reference=_ref_lu_factor,
            doc="packed LU (unit L below the diagonal, U on and above), 1-based i32 pivot rows, info (as LAPACK getrf)")
register_op("inv", results=2, shape=_factor_shape("inv"), reference=_ref_inv, doc="inverse of each matrix, and info")
register_op("solve", operands=2, results=2, shape=_solve_shape, reference=_ref_solve,
            doc="X with A X = B for each matrix A [..., n, n] and right-hand sides B [..., n, k], and info")
register_op("cholesky", results=2, shape=_factor_shape("cholesky"), reference=_ref_cholesky,
            attrs={"upper": Attr("bool", False)},
            doc="L with L L^T = A (upper: U = L^T) of each symmetric positive-definite matrix (its lower half), "
                "and info")
register_op("lu_permutation", shape=_permutation_shape, reference=_ref_permutation, attrs={"rows": Attr("int")},
            doc="the row order perm (i64, A[perm] = L U) of 1-based LAPACK pivots, for matrices of `rows` rows")
