"""Linear algebra on batches of matrices: `det`, `slogdet`, `lu_factor`, `inv`, `solve`, `cholesky`,
`lu_permutation` (the row order that `lu_factor`'s pivots stand for), and the orthogonal factorisations `geqrf`,
`householder_product`, `svd`, `eigh`, with `matrix_exp`.

Each op takes [..., n, n] matrices (the leading axes are a batch) of a float type and computes in float64. The C
kernels (backends/cpu/library_linalg.py) factor with partial pivoting in LAPACK getf2's order, so values and pivots
agree with LAPACK's to rounding. `lu_factor`, `inv`, `solve` and `cholesky` also give LAPACK's `info` per matrix (i32:
0, or 1 + the first column whose pivot is exactly zero / whose leading minor is not positive definite). A matrix that
cannot be factored has a determinant of 0 (`slogdet`: sign 0, log -inf) and NaN in its whole `inv`, `solve` or
`cholesky` result: a compiled call has no per-matrix error channel, and NaN cannot be taken for a value.

`geqrf` uses LAPACK's reflectors (dlarfg's signs), so QR factors agree with LAPACK's to rounding. Singular vectors and
eigenvectors are unique only up to sign: here each column of U (of the eigenvectors) has its largest-magnitude entry
positive, where LAPACK's signs fall out of its algorithm; for a repeated singular value or eigenvalue any orthonormal
basis of the subspace is right, and the kernel's (Jacobi) and the reference's (numpy.linalg) may differ there.
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


# -- orthogonal factorisations: QR (Householder, LAPACK geqr2's reflectors), SVD, symmetric eigen, matrix exp ---
def _matrix(ctx, t, name: str) -> tuple:
    """A [..., m, n] float operand with static m and n: (m, n)."""
    require_dtype(ctx, t, lambda d: d.is_float, name)
    if t.rank < 2 or not all(isinstance(d, int) for d in t.shape[-2:]):
        raise ctx.error(f"'{name}' needs a matrix or a batch of them ([..., m, n], m and n static), got {t}")
    return t.shape[-2:]


def _geqrf_shape(ctx, types, attrs):
    t = types[0]
    m, n = _matrix(ctx, t, "geqrf")
    return [t, t.with_shape(t.shape[:-2] + (min(m, n),))]


def _householder_shape(ctx, types, attrs):
    a, tau = types
    m, n = _matrix(ctx, a, "householder_product")
    if tau.dtype is not a.dtype or tau.rank != a.rank - 1 or not isinstance(tau.shape[-1], int):
        raise ctx.error(f"'householder_product' needs tau [..., k] of the matrix's batch and type, got {a} and {tau}")
    for i, (x, y) in enumerate(zip(a.shape[:-2], tau.shape[:-1])):
        ctx.require_equal(x, y, f"'householder_product' batch dimension {i}")
    if not tau.shape[-1] <= n <= m:
        raise ctx.error(f"'householder_product' needs k <= n <= m for A [..., m, n] and tau [..., k], got {a}, {tau}")
    return [a]


def _svd_shape(ctx, types, attrs):
    t = types[0]
    m, n = _matrix(ctx, t, "svd")
    k, batch = min(m, n), t.shape[:-2]
    return [t.with_shape(batch + (m, k)), t.with_shape(batch + (k,)), t.with_shape(batch + (k, n))]


def _eigh_shape(ctx, types, attrs):
    t = types[0]
    _square(ctx, t, "eigh")
    return [t.with_shape(t.shape[:-1]), t]


def _matrix_exp_shape(ctx, types, attrs):
    _square(ctx, types[0], "matrix_exp")
    return [types[0]]


def _geqr2(m):
    """(packed reflectors and R, tau) of one float64 matrix: LAPACK geqr2 with dlarfg's reflectors (beta carries the
    sign opposite to the diagonal's; a column already zero below the diagonal gets tau = 0)."""
    a = m.copy()
    tau = np.zeros(min(a.shape))
    for j in range(tau.size):
        alpha, xnorm = a[j, j], np.linalg.norm(a[j + 1:, j])
        if xnorm == 0:
            continue
        beta = -np.copysign(np.hypot(alpha, xnorm), alpha)
        tau[j] = (beta - alpha) / beta
        a[j + 1:, j] /= alpha - beta
        a[j, j] = beta
        v = np.concatenate([[1.0], a[j + 1:, j]])
        a[j:, j + 1:] -= tau[j] * np.outer(v, v @ a[j:, j + 1:])
    return a, tau


def _orgqr(a, tau):
    """The first n columns of H_0 H_1 ... H_{k-1}, each H_i = I - tau_i v_i v_i^T with v_i below a's diagonal."""
    m, n = a.shape
    q = np.eye(m, n)
    for i in reversed(range(tau.size)):
        v = np.concatenate([[1.0], a[i + 1:, i]])
        q[i:] -= tau[i] * np.outer(v, v @ q[i:])
    return q


def _per_matrix(fn, *xs):
    """fn (float64 in, a tuple of arrays out) on each matrix of the batch of xs[0]; the other operands share that batch
    (their own trailing axes follow it). The results are stacked back onto the batch, in xs[0]'s type."""
    batch = xs[0].shape[:-2]
    count = int(np.prod(batch))
    flat = [np.asarray(x, np.float64).reshape((count,) + x.shape[len(batch):]) for x in xs]
    parts = [fn(*(x[b] for x in flat)) for b in range(count)]
    shapes = [r.shape for r in (parts[0] if parts else fn(*(np.zeros(x.shape[1:]) for x in flat)))]
    return [np.asarray([p[i] for p in parts]).reshape(batch + shape).astype(xs[0].dtype)
            for i, shape in enumerate(shapes)]


def _positive_peaks(vectors, rows=None):
    """Each column of `vectors` (and the matching row of `rows`) negated where the column's entry of largest magnitude
    is negative: the sign convention of `svd` and `eigh` (a singular or eigen vector is unique only up to sign)."""
    if not vectors.size:
        return vectors, rows
    peak = vectors[np.argmax(np.abs(vectors), axis=0), np.arange(vectors.shape[1])]
    flip = np.where(peak < 0, -1.0, 1.0)
    return (vectors * flip, None if rows is None else rows * flip[:, None])


def _ref_svd_one(m):
    u, s, vh = np.linalg.svd(m, full_matrices=False)
    u, vh = _positive_peaks(u, vh)
    return u, s, vh


def _ref_eigh_one(m, upper):
    w, v = np.linalg.eigh(m, UPLO="U" if upper else "L")
    return w, _positive_peaks(v)[0]


_PADE13 = (64764752532480000., 32382376266240000., 7771770303897600., 1187353796428800., 129060195264000.,
           10559470521600., 670442572800., 33522128640., 1323241920., 40840800., 960960., 16380., 182., 1.)
_THETA13 = 5.371920351148152  # Higham (2005): the largest 1-norm for which Pade [13/13] is accurate in float64


def _ref_matrix_exp_one(m):
    """Scaling and squaring with the [13/13] Pade approximant (Higham 2005), in the C kernel's order."""
    norm = np.abs(m).sum(axis=0).max(initial=0.0)
    if not np.isfinite(norm):  # an entry inf or NaN: NaN throughout
        return (np.full_like(m, np.nan),)
    s = max(0, int(np.ceil(np.log2(norm / _THETA13)))) if norm > _THETA13 else 0
    a = m / 2.0 ** s
    b, eye = _PADE13, np.eye(m.shape[0])
    a2 = a @ a
    a4 = a2 @ a2
    a6 = a4 @ a2
    u = a @ (a6 @ (b[13] * a6 + b[11] * a4 + b[9] * a2) + b[7] * a6 + b[5] * a4 + b[3] * a2 + b[1] * eye)
    v = a6 @ (b[12] * a6 + b[10] * a4 + b[8] * a2) + b[6] * a6 + b[4] * a4 + b[2] * a2 + b[0] * eye
    r = np.linalg.solve(v - u, v + u)
    for _ in range(s):
        r = r @ r
    return (r,)


register_op("geqrf", results=2, shape=_geqrf_shape, reference=lambda xs, a: _per_matrix(_geqr2, xs[0]),
            doc="Householder QR as LAPACK geqrf: R on and above the diagonal, the reflectors below it, and tau")
register_op("householder_product", operands=2, shape=_householder_shape,
            reference=lambda xs, a: _per_matrix(lambda m, t: (_orgqr(m, t),), *xs),
            doc="the first n columns of H_0 ... H_{k-1} for reflectors below A's diagonal and tau (LAPACK orgqr)")
register_op("svd", results=3, shape=_svd_shape, reference=lambda xs, a: _per_matrix(_ref_svd_one, xs[0]),
            doc="thin SVD A = U diag(S) Vh, S descending; each column of U has its largest-magnitude entry positive")
register_op("eigh", results=2, shape=_eigh_shape, attrs={"upper": Attr("bool", False)},
            reference=lambda xs, a: _per_matrix(lambda m: _ref_eigh_one(m, a["upper"]), xs[0]),
            doc="eigenvalues (ascending) and eigenvectors of each symmetric matrix, read from its lower (upper) "
                "triangle; each eigenvector has its largest-magnitude entry positive")
register_op("matrix_exp", shape=_matrix_exp_shape, reference=lambda xs, a: _per_matrix(_ref_matrix_exp_one, xs[0]),
            doc="the exponential of each square matrix (scaling and squaring, Pade [13/13])")


_BUNCH_KAUFMAN = (1 + np.sqrt(17.0)) / 8  # sytf2's alpha: a 1 x 1 pivot when |a_kk| >= alpha * the column's largest


def _bk_pivot(a, k):
    """(kp, kstep) of Bunch-Kaufman at column k, or None for a zero column."""
    n = a.shape[0]
    absakk = abs(a[k, k])
    imax = k + 1 + int(np.argmax(np.abs(a[k + 1:, k]))) if k < n - 1 else k
    colmax = abs(a[imax, k]) if k < n - 1 else 0.0
    if max(absakk, colmax) == 0 or np.isnan(absakk):
        return None
    if absakk >= _BUNCH_KAUFMAN * colmax:
        return k, 1
    rowmax = max(np.abs(a[imax, k:imax]).max(), np.abs(a[imax + 1:, imax]).max(initial=0.0))
    if absakk >= _BUNCH_KAUFMAN * colmax * (colmax / rowmax):
        return k, 1
    return imax, 1 if abs(a[imax, imax]) >= _BUNCH_KAUFMAN * rowmax else 2


def _bk_swap(a, k, kp, kstep):
    """sytf2's interchange of rows and columns kk = k + kstep - 1 and kp in the lower triangle."""
    kk = k + kstep - 1
    a[kp + 1:, [kk, kp]] = a[kp + 1:, [kp, kk]]
    col, row = a[kk + 1:kp, kk].copy(), a[kp, kk + 1:kp].copy()
    a[kk + 1:kp, kk], a[kp, kk + 1:kp] = row, col
    a[[kk, kp], [kk, kp]] = a[[kp, kk], [kp, kk]]
    if kstep == 2:
        a[[k + 1, kp], k] = a[[kp, k + 1], k]


def _bk_eliminate(a, k, kstep):
    n = a.shape[0]
    if kstep == 1:
        for j in range(k + 1, n):
            a[j:, j] -= a[j:, k] * a[j, k] / a[k, k]
        a[k + 1:, k] /= a[k, k]
    elif k < n - 2:
        d21 = a[k + 1, k]
        d11, d22 = a[k + 1, k + 1] / d21, a[k, k] / d21
        d21 = 1 / (d11 * d22 - 1) / d21
        for j in range(k + 2, n):
            wk, wkp1 = d21 * (d11 * a[j, k] - a[j, k + 1]), d21 * (d22 * a[j, k + 1] - a[j, k])
            a[j:, j] -= a[j:, k] * wk + a[j:, k + 1] * wkp1
            a[j, k], a[j, k + 1] = wk, wkp1


def _sytf2(m):
    """(L and D packed in the lower triangle, 1-based pivots, info) of one float64 matrix's lower triangle: LAPACK
    sytf2 'L' (Bunch-Kaufman), whose pivots PyTorch's ldl_factor returns."""
    a, n = np.tril(m) + np.tril(m, -1).T, m.shape[0]
    piv, info, k = np.zeros(n), 0, 0
    while k < n:
        chosen = _bk_pivot(a, k)
        kp, kstep = chosen or (k, 1)
        if chosen is None:
            info = info or k + 1
        else:
            if kp != k + kstep - 1:
                _bk_swap(a, k, kp, kstep)
            _bk_eliminate(a, k, kstep)
        piv[k:k + kstep] = kp + 1 if kstep == 1 else -(kp + 1)
        k += kstep
    return np.tril(a), piv, np.float64(info)


def _ldl_shape(ctx, types, attrs):
    _square(ctx, types[0], "ldl_factor")
    t = types[0]
    return [t, TensorType(DType.i32, t.shape[:-1]), _info(t)]


def _ref_ldl(xs, a):
    ld, piv, info = _per_matrix(_sytf2, xs[0])
    return [ld, piv.astype(np.int32), info.astype(np.int32)]


register_op("ldl_factor", results=3, shape=_ldl_shape, reference=_ref_ldl,
            doc="Bunch-Kaufman L D L^T of each symmetric matrix (its lower triangle) as LAPACK sytrf 'L': the packed "
                "factors, 1-based i32 pivots (negative twice for a 2 x 2 block), info")
