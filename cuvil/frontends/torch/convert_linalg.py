"""ATen linear algebra onto cuvil/ops/linalg.py: determinants, LU, inverse, solve, Cholesky, and what is built from
them (triangular solves, `cholesky_solve`, `cholesky_inverse`); QR and its reflectors (`ormqr`), SVD, `eigh`, the
pseudo-inverse built from them, and `matrix_exp`. (matrix_rank, cond and the nuclear norm reach `_linalg_svd` or
`_linalg_eigh` through torch's own decompositions.) The error checks torch.export threads through effect
tokens (`_linalg_check_errors`) are dropped: a matrix that cannot be factored gives NaN (see ops/linalg.py).

Batch axes broadcast between a matrix and its right-hand sides, as in torch.linalg.solve.
"""
from __future__ import annotations

import numpy as np

from ...ir.dtypes import DType
from ...ops.common import broadcast_shapes
from .context import CONVERTERS, aten


def _mT(cx, x):
    """The last two axes swapped."""
    perm = list(range(x.type.rank))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    return cx.b.transpose(x, perm=perm)


@aten("_linalg_det")
def det(cx, a):
    """(det, LU, pivots): the factors are dropped as dead code when nothing reads them."""
    lu, piv, _ = cx.b.lu_factor(a)
    return cx.b.det(a), lu, piv


@aten("_linalg_slogdet")
def slogdet(cx, a):
    """(sign, logabsdet, LU, pivots)."""
    lu, piv, _ = cx.b.lu_factor(a)
    return (*cx.b.slogdet(a), lu, piv)


@aten("linalg_lu_factor_ex")
def lu_factor_ex(cx, a, pivot=True, check_errors=False):
    if not pivot:
        raise cx.error("LU without pivoting is not supported (pivot=True is)")
    return cx.b.lu_factor(a)


def _permutation_matrix(cx, piv, rows: int, dtype):
    """P with A = P L U for `lu_factor`'s pivots: P[..., perm[c], c] = 1."""
    perm = cx.b.lu_permutation(piv, rows=rows)
    shape = perm.type.shape[:-1] + (rows, rows)
    columns = cx.broadcast(cx.b.reshape(perm, shape=perm.type.shape[:-1] + (1, rows)), shape)
    return cx.b.cast(cx.b.eq(columns, cx.b.iota(shape=shape, axis=len(shape) - 2)), dtype=dtype)


def _unpack(cx, lu, piv):
    """(P, L, U) of a packed [..., m, n] LU: L is m x k with a unit diagonal, U is k x n, k = min(m, n)."""
    m, n = lu.type.shape[-2:]
    k = min(m, n)
    rank = lu.type.rank
    low = _triangle(cx, cx.b.slice(lu, starts=(0,), ends=(k,), axes=(rank - 1,)), upper=False, unit=True)
    up = _triangle(cx, cx.b.slice(lu, starts=(0,), ends=(k,), axes=(rank - 2,)), upper=True)
    return _permutation_matrix(cx, piv, m, lu.type.dtype), low, up


@aten("linalg_lu")
def lu(cx, a, pivot=True):
    if not pivot:
        raise cx.error("LU without pivoting is not supported (pivot=True is)")
    lu_, piv, _ = cx.b.lu_factor(a)
    return _unpack(cx, lu_, piv)


@aten("lu_unpack")
def lu_unpack(cx, lu_, piv, unpack_data=True, unpack_pivots=True):
    return _unpack(cx, lu_, piv)


@aten("linalg_lu_solve")
def lu_solve(cx, lu_, piv, b, left=True, adjoint=False):
    """X of A X = B (or X A = B) for A = P L U, from the factors: two triangular solves and a permutation."""
    if not left:  # X A = B is A^T X^T = B^T
        return _mT(cx, lu_solve(cx, lu_, piv, _mT(cx, b), True, not adjoint))
    p, low, up = _unpack(cx, lu_, piv)
    if adjoint:  # A^T X = B: U^T L^T P^T X = B
        return _matmul(cx, p, _solve(cx, _mT(cx, low), _solve(cx, _mT(cx, up), b)))
    return _solve(cx, up, _solve(cx, low, _matmul(cx, _mT(cx, p), b)))


def _matmul(cx, a, b):
    """a @ b with the batch axes broadcast."""
    batch = broadcast_shapes(a.type.shape[:-2], b.type.shape[:-2])
    return cx.b.matmul(cx.broadcast(a, batch + a.type.shape[-2:]), cx.broadcast(b, batch + b.type.shape[-2:]))


@aten("linalg_inv_ex")
def inv_ex(cx, a, check_errors=False):
    return cx.b.inv(a)


@aten("linalg_cholesky_ex")
def cholesky_ex(cx, a, upper=False, check_errors=False):
    return cx.b.cholesky(a, upper=bool(upper))


@aten("cholesky")
def cholesky(cx, a, upper=False):
    """The deprecated torch.cholesky: the factor alone (it raises where the _ex form reports info)."""
    return cx.b.cholesky(a, upper=bool(upper))[0]


@aten("_linalg_solve_ex")
def solve_ex(cx, a, b, left=True, check_errors=False):
    """(X, LU, pivots, info); a vector B (B's shape is A's without the last axis, or B is 1-D) is one column."""
    vector = b.type.rank == 1 or (b.type.rank == a.type.rank - 1 and b.type.shape == a.type.shape[:-1])
    x = _solve(cx, a, cx.b.reshape(b, shape=b.type.shape + (1,)) if vector else b, left)
    if vector:
        x = cx.b.reshape(x, shape=x.type.shape[:-1])
    lu, piv, info = cx.b.lu_factor(a)
    return x, lu, piv, info


def _solve(cx, a, b, left: bool = True):
    """X with A X = B (left) or X A = B, batch axes broadcast."""
    if not left:
        return _mT(cx, _solve(cx, _mT(cx, a), _mT(cx, b)))
    batch = broadcast_shapes(a.type.shape[:-2], b.type.shape[:-2])
    a = cx.broadcast(a, batch + a.type.shape[-2:])
    b = cx.broadcast(b, batch + b.type.shape[-2:])
    return cx.b.solve(a, b)[0]


def _triangle(cx, x, upper: bool, unit: bool = False):
    """The upper (or lower) triangle of each matrix, the rest zero; with `unit`, ones on the diagonal."""
    shape = x.type.shape
    offset = cx.b.sub(cx.b.iota(shape=shape, axis=x.type.rank - 1), cx.b.iota(shape=shape, axis=x.type.rank - 2))
    zero = cx.tensor(0, DType.i64, shape)
    kept = cx.b.where(cx.b.ge(offset, zero) if upper else cx.b.le(offset, zero), x, cx.tensor(0, x.type.dtype, shape))
    return cx.b.where(cx.b.eq(offset, zero), cx.tensor(1, x.type.dtype, shape), kept) if unit else kept


@aten("linalg_solve_triangular")
def solve_triangular(cx, a, b, upper, left=True, unitriangular=False):
    return _solve(cx, _triangle(cx, a, bool(upper), bool(unitriangular)), b, bool(left))


@aten("triangular_solve")
def triangular_solve(cx, b, a, upper=True, transpose=False, unitriangular=False):
    """(X, A) of op(A) X = B, op(A) = A or A^T, reading A's triangle."""
    tri = _triangle(cx, a, bool(upper), bool(unitriangular))
    return _solve(cx, _mT(cx, tri) if transpose else tri, b), a


def _cholesky_apply(cx, factor, b, upper: bool):
    """(F F^T)^-1 B for a lower factor F (upper: (F^T F)^-1 B), as two triangular solves."""
    tri = _triangle(cx, factor, upper)
    first, second = (_mT(cx, tri), tri) if upper else (tri, _mT(cx, tri))
    return _solve(cx, second, _solve(cx, first, b))


@aten("cholesky_solve")
def cholesky_solve(cx, b, factor, upper=False):
    return _cholesky_apply(cx, factor, b, bool(upper))


@aten("cholesky_inverse")
def cholesky_inverse(cx, factor, upper=False):
    n = factor.type.shape[-1]
    eye = cx.b.cast(cx.b.eq(cx.b.iota(shape=(n, n), axis=0), cx.b.iota(shape=(n, n), axis=1)),
                    dtype=factor.type.dtype)
    return _cholesky_apply(cx, factor, cx.broadcast(eye, factor.type.shape), bool(upper))


# -- QR, SVD, symmetric eigen-decomposition, pseudo-inverse, matrix exponential ----------------------------
def _columns(cx, x, width: int):
    """x's first `width` columns, zero columns appended where it has fewer."""
    rank, n = x.type.rank, x.type.shape[-1]
    if n >= width:
        return cx.b.slice(x, starts=(0,), ends=(width,), axes=(rank - 1,))
    return cx.b.pad(x, pads=(0,) * (2 * rank - 1) + (width - n,))


def _rows(cx, x, count: int, axis: int):
    return cx.b.slice(x, starts=(0,), ends=(count,), axes=(axis,))


def _square_q(cx, packed, tau):
    """The whole m x m Q of geqrf's reflectors (`packed` is [..., m, n]): a reflector with tau = 0 is the identity."""
    m = packed.type.shape[-2]
    return cx.b.householder_product(_columns(cx, packed, m), _columns(cx, tau, m))


def _empty(cx, i: int):
    """torch's empty placeholder for a factor that was not asked for."""
    return cx.b.full(0.0, cx.out_shape(i), cx.out_dtype(i))


@aten("geqrf")
def geqrf(cx, a):
    return cx.b.geqrf(a)


@aten("linalg_householder_product")
def householder_product(cx, a, tau):
    return cx.b.householder_product(a, tau)


@aten("linalg_qr")
def qr(cx, a, mode="reduced"):
    """Q from the reflectors (reduced: m x k; complete: m x m; r: none), R the upper triangle of geqrf's result."""
    packed, tau = cx.b.geqrf(a)
    m, n = a.type.shape[-2:]
    k = min(m, n)
    r = _triangle(cx, packed if mode == "complete" else _rows(cx, packed, k, a.type.rank - 2), upper=True)
    if mode == "r":
        return _empty(cx, 0), r
    q = _square_q(cx, packed, tau) if mode == "complete" else cx.b.householder_product(_columns(cx, packed, k), tau)
    return q, r


@aten("ormqr")
def ormqr(cx, a, tau, other, left=True, transpose=False):
    """op(Q) C (left) or C op(Q), Q the square product of the reflectors in `a` [..., mn, k]."""
    q = _square_q(cx, a, tau)
    q = _mT(cx, q) if transpose else q
    return _matmul(cx, q, other) if left else _matmul(cx, other, q)


def _completed(cx, u):
    """[..., m, k] orthonormal columns extended to an m x m orthogonal matrix (full_matrices=True)."""
    m, k = u.type.shape[-2:]
    if m == k:
        return u
    extra = cx.b.slice(_square_q(cx, *cx.b.geqrf(u)), starts=(k,), ends=(m,), axes=(u.type.rank - 1,))
    return cx.b.concat(u, extra, axis=u.type.rank - 1)


@aten("_linalg_svd")
def svd(cx, a, full_matrices=False, compute_uv=True, driver=None):
    """(U, S, Vh); signs as ops/linalg.py's `svd` fixes them (torch's LAPACK call leaves them to the algorithm)."""
    u, s, vh = cx.b.svd(a)
    if not compute_uv:
        return _empty(cx, 0), s, _empty(cx, 2)
    if full_matrices:
        u, vh = _completed(cx, u), _mT(cx, _completed(cx, _mT(cx, vh)))
    return u, s, vh


@aten("_linalg_eigh")
def eigh(cx, a, UPLO="L", compute_v=True):
    w, v = cx.b.eigh(a, upper=UPLO == "U")
    return w, v if compute_v else _empty(cx, 1)


def _pinv_tolerance(cx, a, atol, rtol, largest):
    """torch's cut-off max(atol, rtol * largest singular value), rtol defaulting to eps * max(m, n) (0 when an atol
    > 0 is given), as [..., 1] against the singular values."""
    dt = a.type.dtype
    default = float(np.finfo(dt.numpy).eps) * max(a.type.shape[-2:])
    if rtol is None:
        rtol = default if atol is None else cx.b.where(cx.b.gt(*cx.operands([atol, 0.0], dt)),
                                                       *cx.operands([0.0, default, atol], dt)[:2])
    atol, rtol = cx.tensor(0.0 if atol is None else atol, dt), cx.tensor(rtol, dt)
    unsqueezed = [cx.b.reshape(t, shape=t.type.shape + (1,)) for t in (atol, rtol)]
    atol, rtol, largest = cx.operands([*unsqueezed, largest], dt)
    return cx.b.max(atol, cx.b.mul(rtol, largest))


@aten("linalg_pinv")
def pinv(cx, a, atol=None, rtol=None, hermitian=False):
    """V diag(1/s) U^T over the singular values above the cut-off (hermitian: from the eigen-decomposition)."""
    m, n = a.type.shape[-2:]
    rank = a.type.rank
    if min(m, n) == 0:
        return cx.tensor(0.0, a.type.dtype, a.type.shape[:-2] + (n, m))
    if hermitian:
        w, v = cx.b.eigh(a)
        size = cx.b.abs(w)
        left, right = v, _mT(cx, v)
        largest = cx.b.reduce_max(size, axes=[rank - 2], keepdims=True)
    else:
        u, w, vh = cx.b.svd(a)
        size, left, right = w, _mT(cx, vh), _mT(cx, u)
        largest = _rows(cx, w, 1, rank - 2)
    tol = _pinv_tolerance(cx, a, atol, rtol, largest)
    tol = cx.broadcast(tol, size.type.shape)
    zero = cx.tensor(0.0, a.type.dtype, size.type.shape)
    inverse = cx.b.where(cx.b.gt(size, tol), cx.b.div(cx.tensor(1.0, a.type.dtype, size.type.shape), w), zero)
    scaled = cx.b.mul(left, cx.broadcast(cx.b.reshape(inverse, shape=inverse.type.shape[:-1] + (1, min(m, n))),
                                         left.type.shape))
    return cx.b.matmul(scaled, right)


@aten("linalg_ldl_factor_ex")
def ldl_factor_ex(cx, a, hermitian=False, check_errors=False):
    """(LD, pivots, info); for real matrices the hermitian and symmetric factorisations are one."""
    return cx.b.ldl_factor(a)


@aten("linalg_matrix_exp")
def matrix_exp(cx, a):
    return cx.b.matrix_exp(a)


def _check_errors_effect(cx, token, op, *args):
    """torch.export's `with_effects(token, aten._linalg_check_errors, ...)`: the check is dropped (NaN instead of an
    exception), and the token passes through."""
    if str(op) != "aten._linalg_check_errors.default":
        raise cx.error(f"the side effect {op} is not supported")
    return (token,)


CONVERTERS["with_effects"] = _check_errors_effect
