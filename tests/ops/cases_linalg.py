"""Linear-algebra cases (cuvil/ops/linalg.py), each against NumPy's LAPACK (or PyTorch's getrf) as the oracle."""
import numpy as np

from .cases import Case, rand

A = rand(2, 3, 4, 4)  # a batch of general matrices
A64 = rand(5, 5, dtype="float64", seed=1)
SINGULAR = np.array([[[1, 2], [2, 4]], [[2, 1], [1, 3]]], np.float32)  # the first has no inverse
SPD = (A @ np.swapaxes(A, -1, -2) + 4 * np.eye(4, dtype=np.float32)).astype(np.float32)
RHS = rand(2, 3, 4, 2, seed=2)


def _f64(x):
    return np.asarray(x, np.float64)


def _ok(x):
    return np.zeros(np.shape(x)[:-2], np.int32)


def _lu_oracle(xs):
    import torch

    lu, piv = torch.linalg.lu_factor(torch.from_numpy(_f64(xs[0])))
    return [lu.numpy(), piv.numpy(), _ok(xs[0])]


def _singular_inv(xs):
    good = np.linalg.inv(_f64(xs[0][1]))
    return [np.stack([np.full((2, 2), np.nan), good]), np.array([2, 0], np.int32)]


def _perm_oracle(xs, rows):
    import torch

    piv = torch.from_numpy(xs[0])
    lu = torch.zeros(piv.shape[:-1] + (rows, piv.shape[-1]))
    p = torch.lu_unpack(lu, piv, unpack_data=False)[0]  # A = P L U; P[perm[c], c] = 1
    return [p.argmax(-2).numpy().astype(np.int64)]


CASES = [
    Case("lu_permutation", [np.array([[2, 3, 3], [1, 2, 3]], np.int32)], {"rows": 3},
         expected=lambda xs: _perm_oracle(xs, 3)),
    Case("lu_permutation", [np.array([[3, 2]], np.int32)], {"rows": 4}, expected=lambda xs: _perm_oracle(xs, 4),
         id="rectangular"),
    Case("det", [A], expected=lambda xs: [np.linalg.det(_f64(xs[0]))], rtol=1e-5, atol=1e-5),
    Case("det", [A64], expected=lambda xs: [np.linalg.det(xs[0])], id="f64", rtol=1e-11),
    Case("det", [SINGULAR], expected=lambda xs: [np.array([0.0, 5.0])], id="singular"),
    Case("det", [np.zeros((2, 0, 0), np.float32)], expected=lambda xs: [np.ones(2)], id="empty-matrix"),
    Case("slogdet", [A], expected=lambda xs: list(np.linalg.slogdet(_f64(xs[0]))), rtol=1e-5, atol=1e-5),
    Case("slogdet", [SINGULAR], expected=lambda xs: [np.array([0.0, 1.0]), np.array([-np.inf, np.log(5.0)])],
         id="singular"),
    Case("lu_factor", [A], expected=_lu_oracle, rtol=1e-5, atol=1e-5),
    Case("lu_factor", [A64], expected=_lu_oracle, id="f64"),
    Case("inv", [A], expected=lambda xs: [np.linalg.inv(_f64(xs[0])), _ok(xs[0])], rtol=1e-4, atol=1e-5),
    Case("inv", [SINGULAR], expected=_singular_inv, id="singular"),
    Case("inv", [np.zeros((0, 3, 3), np.float32)], expected=lambda xs: [np.zeros((0, 3, 3)), _ok(xs[0])],
         id="empty-batch"),
    Case("solve", [A, RHS], expected=lambda xs: [np.linalg.solve(_f64(xs[0]), _f64(xs[1])), _ok(xs[0])],
         rtol=1e-4, atol=1e-5),
    Case("solve", [A, rand(2, 3, 4, 4, seed=3)], expected=lambda xs: [np.linalg.solve(_f64(xs[0]), _f64(xs[1])),
                                                                        _ok(xs[0])], id="square-rhs", rtol=1e-4,
         atol=1e-5),
    Case("cholesky", [SPD], expected=lambda xs: [np.linalg.cholesky(_f64(xs[0])), _ok(xs[0])], rtol=1e-5,
         atol=1e-5),
    Case("cholesky", [SPD], {"upper": True},
         expected=lambda xs: [np.swapaxes(np.linalg.cholesky(_f64(xs[0])), -1, -2), _ok(xs[0])], id="upper",
         rtol=1e-5, atol=1e-5),
    Case("cholesky", [np.array([[[4, 0], [2, -1]], [[1, 9], [0, 1]]], np.float32)],
         expected=lambda xs: [np.stack([np.full((2, 2), np.nan), np.eye(2)]), np.array([2, 0], np.int32)],
         id="not-positive-definite"),
]


def _torch(name: str, *xs):
    """PyTorch's `name` (a dotted path under torch) on float64 copies of xs, as arrays."""
    import operator

    import torch

    out = operator.attrgetter(name)(torch)(*(torch.from_numpy(_f64(x)) for x in xs))
    return [t.numpy() for t in (tuple(out) if isinstance(out, tuple) else (out,))]


def _peaks_positive(vectors, rows=None):
    """The ops' sign convention applied to an oracle's vectors: each column's largest-magnitude entry positive."""
    at = np.argmax(np.abs(vectors), axis=-2)[..., None, :]
    flip = np.where(np.take_along_axis(vectors, at, axis=-2) < 0, -1.0, 1.0)
    return vectors * flip, None if rows is None else rows * np.swapaxes(flip, -1, -2)


def _svd_oracle(xs):
    import torch

    u, s, vh = (t.numpy() for t in torch.linalg.svd(torch.from_numpy(_f64(xs[0])), full_matrices=False))
    u, vh = _peaks_positive(u, vh)
    return [u, s, vh]


def _eigh_oracle(xs, upper=False):
    import torch

    w, v = torch.linalg.eigh(torch.from_numpy(_f64(xs[0])), UPLO="U" if upper else "L")
    return [w.numpy(), _peaks_positive(v.numpy())[0]]


def _reflectors(x):
    return [np.float32(r) for r in _torch("geqrf", x)]


def _hilbert(n):
    return 1.0 / (np.arange(n)[:, None] + np.arange(n)[None, :] + 1.0)


TALL, WIDE = rand(3, 7, 4, seed=4), rand(2, 3, 6, seed=5)
NONSYM = rand(2, 5, 5, seed=6)  # eigh reads one triangle: the other is ignored
CASES += [
    Case("geqrf", [TALL], expected=lambda xs: _torch("geqrf", *xs),
         rtol=1e-5, atol=1e-5),
    Case("geqrf", [WIDE], expected=lambda xs: _torch("geqrf", *xs), id="wide",
         rtol=1e-5, atol=1e-5),
    Case("geqrf", [np.array([[2, 1], [0, 3], [0, 0]], np.float32)], expected=lambda xs: [xs[0], np.zeros(2)],
         id="already-triangular"),
    Case("householder_product", _reflectors(TALL),
         expected=lambda xs: _torch("linalg.householder_product", *xs), rtol=1e-5, atol=1e-6),
    Case("householder_product", [TALL, rand(3, 2, seed=7)],
         expected=lambda xs: _torch("linalg.householder_product", *xs), id="fewer-reflectors",
         rtol=1e-5, atol=1e-5),
    Case("svd", [TALL], expected=_svd_oracle, rtol=1e-5, atol=1e-5),
    Case("svd", [WIDE], expected=_svd_oracle, id="wide", rtol=1e-5, atol=1e-5),
    Case("svd", [_hilbert(6)], expected=_svd_oracle, id="ill-conditioned-f64", rtol=1e-9, atol=1e-9),
    Case("svd", [np.zeros((0, 3, 2), np.float32)], expected=_svd_oracle, id="empty-batch"),
    Case("eigh", [NONSYM], expected=_eigh_oracle, rtol=1e-5, atol=1e-5),
    Case("eigh", [NONSYM], {"upper": True}, expected=lambda xs: _eigh_oracle(xs, True), id="upper", rtol=1e-5,
         atol=1e-5),
    Case("eigh", [_hilbert(7)], expected=_eigh_oracle, id="ill-conditioned-f64", rtol=1e-9, atol=1e-9),
    Case("matrix_exp", [rand(2, 5, 5, seed=8)], expected=lambda xs: _torch("linalg.matrix_exp", *xs),
         rtol=1e-5, atol=1e-5),
    Case("matrix_exp", [6 * rand(3, 3, seed=9)], expected=lambda xs: _torch("linalg.matrix_exp", *xs),
         id="squarings", rtol=1e-5, atol=1e-4),
    Case("matrix_exp", [np.array([[0, np.inf], [0, 0]], np.float32)], expected=lambda xs: [np.full((2, 2), np.nan)],
         id="not-finite"),
]


def _ldl_oracle(xs):
    ld, piv, info = _torch("linalg.ldl_factor_ex", *xs)
    return [ld, piv, info]


SING = np.zeros((2, 3, 3), np.float32)
SING[1], SING[0, 2, 2] = np.eye(3), 1  # the first has two zero columns
CASES += [
    Case("ldl_factor", [rand(45, 6, 6, seed=10)], expected=_ldl_oracle, id="2x2-pivots", rtol=1e-4, atol=1e-5),
    Case("ldl_factor", [SPD], expected=_ldl_oracle, rtol=1e-5, atol=1e-5),
    Case("ldl_factor", [SING], expected=_ldl_oracle, id="singular"),
]
