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
