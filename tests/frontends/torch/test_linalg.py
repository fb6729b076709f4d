"""torch.linalg and friends (frontends/torch/convert_linalg.py) against eager PyTorch: interpreted and compiled for
the CPU, at several sizes, with a symbolic batch."""
from __future__ import annotations

import pytest
import torch
from torch.export import Dim

import cuvil

from .helpers import assert_close, run_both

g = torch.Generator().manual_seed(0)


def r(*shape):
    return torch.randn(*shape, generator=g)


def spd(*shape):
    a = r(*shape)
    return a @ a.mT + shape[-1] * torch.eye(shape[-1])


def triangular(*shape, upper=False):
    a = r(*shape) + 3 * torch.eye(shape[-1])  # a diagonal away from zero keeps the systems well conditioned
    return a.triu() if upper else a.tril()


def _svd_invariants(u, s, vh):
    """What an SVD fixes whatever the signs: U S Vh, the magnitudes of the thin factors, U^T U and Vh Vh^T."""
    k = s.shape[-1]
    return (u[..., :k] * s[..., None, :]) @ vh[..., :k, :], u[..., :k].abs(), vh[..., :k, :].abs(), u.mT @ u, vh @ vh.mT


# id -> (function, inputs at two sizes): the first size is the example, the second is run through a new compile.
CASES = {
    "det_slogdet_logdet": (lambda a: (torch.linalg.det(a), *torch.linalg.slogdet(a), torch.logdet(a @ a.mT),
                                      torch.det(a)), [(r(2, 3, 3),), (r(4, 5, 5),)]),
    "inv": (lambda a: (torch.linalg.inv(a), torch.inverse(a), torch.linalg.inv_ex(a)), [(r(3, 4, 4),), (r(2, 1, 1),)]),
    "solve_matrix_vector": (lambda a, b, v: (torch.linalg.solve(a, b), torch.linalg.solve(a, v),
                                             torch.linalg.solve(a, b.mT @ a, left=False)),
                            [(r(2, 4, 4), r(2, 4, 3), r(2, 4)), (r(3, 6, 6), r(3, 6, 2), r(3, 6))]),
    "solve_broadcast_batch": (lambda a, b: torch.linalg.solve(a, b), [(r(3, 3), r(2, 3, 3, 2)), (r(5, 5), r(1, 5, 4))]),
    "solve_ex": (lambda a, b: torch.linalg.solve_ex(a, b), [(r(2, 3, 3), r(2, 3, 1)), (r(4, 4), r(4, 4))]),
    "cholesky": (lambda a: (torch.linalg.cholesky(a), torch.linalg.cholesky(a, upper=True), torch.cholesky(a),
                            torch.linalg.cholesky_ex(a)), [(spd(2, 4, 4),), (spd(7, 7),)]),
    "lu_factor": (lambda a: (torch.linalg.lu_factor(a), torch.linalg.lu_factor_ex(a)),
                  [(r(2, 4, 4),), (r(3, 5, 5),)]),
    "lu_factor_rectangular": (lambda a, b: (torch.linalg.lu_factor(a), torch.linalg.lu_factor(b)),
                              [(r(3, 5), r(2, 5, 3)), (r(4, 6), r(6, 2))]),
    "solve_triangular": (lambda u, low, b: (torch.linalg.solve_triangular(u, b, upper=True),
                                            torch.linalg.solve_triangular(low, b, upper=False, unitriangular=True),
                                            torch.linalg.solve_triangular(u, b.mT, upper=True, left=False),
                                            torch.triangular_solve(b, u), torch.triangular_solve(b, low, False, True)),
                         [(triangular(2, 4, 4, upper=True), triangular(2, 4, 4), r(2, 4, 3)),
                          (triangular(5, 5, upper=True), triangular(5, 5), r(5, 2))]),
    "lu_unpack_solve": (lambda a, b: (torch.linalg.lu(a), torch.lu_unpack(*torch.linalg.lu_factor(a)),
                                      torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b),
                                      torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b, adjoint=True),
                                      torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b.mT, left=False)),
                        [(r(2, 4, 4), r(2, 4, 3)), (r(5, 5), r(5, 5))]),
    "lu_rectangular": (lambda a, b: (torch.linalg.lu(a), torch.linalg.lu(b)),
                       [(r(3, 5), r(2, 5, 3)), (r(1, 4), r(4, 1))]),
    "triangle_of_a_full_matrix": (lambda a, b: (torch.triangular_solve(b, a), torch.linalg.solve_triangular(a, b,
                                                                                                          upper=False)),
                                  [(r(2, 4, 4) + 4 * torch.eye(4), r(2, 4, 3)), (r(3, 3) + 4 * torch.eye(3), r(3, 2))]),
    "cholesky_solve_inverse": (lambda low, b: (torch.cholesky_solve(b, low), torch.cholesky_solve(b, low.mT, True),
                                               torch.cholesky_inverse(low), torch.cholesky_inverse(low.mT, True)),
                               [(torch.linalg.cholesky(spd(2, 4, 4)), r(2, 4, 3)),
                                (torch.linalg.cholesky(spd(6, 6)), r(6, 1))]),
    "qr_reflectors": (lambda a, b, c: (torch.linalg.qr(a), torch.linalg.qr(a, mode="complete"), torch.qr(b),
                                       torch.linalg.qr(b, mode="r")[1], torch.linalg.qr(b, mode="complete"),
                                       torch.geqrf(a), torch.linalg.householder_product(*torch.geqrf(a)),
                                       torch.ormqr(*torch.geqrf(a), c), torch.ormqr(*torch.geqrf(a), c, True, True),
                                       torch.ormqr(*torch.geqrf(a), c.mT, left=False)),
                      [(r(2, 5, 3), r(3, 4), r(2, 5, 2)), (r(7, 7), r(4, 6), r(7, 3))]),
    # Singular vectors and eigenvectors are unique up to sign: compared through what does not depend on it.
    "svd_based": (lambda a: (torch.linalg.svdvals(a), torch.linalg.pinv(a), torch.linalg.matrix_rank(a),
                             torch.linalg.cond(a), torch.linalg.matrix_norm(a, "nuc"), torch.linalg.matrix_norm(a, 2),
                             _svd_invariants(*torch.linalg.svd(a)), _svd_invariants(*torch.linalg.svd(a, False)),
                             torch.linalg.pinv(a, rtol=0.3), torch.linalg.pinv(a, atol=0.5)),
                  [(r(2, 5, 3),), (r(4, 6),), (r(3, 3),)]),
    "rank_deficient": (lambda a: (torch.linalg.pinv(a), torch.linalg.matrix_rank(a), torch.linalg.svdvals(a)[..., :2]),
                       [(r(6, 2) @ r(2, 5),), (r(3, 4, 1) @ r(3, 1, 4),)]),
    "eigh_based": (lambda a: (torch.linalg.eigvalsh(a), torch.linalg.eigvalsh(a, UPLO="U"),
                              torch.linalg.eigh(a)[1].abs(), torch.linalg.pinv(a, hermitian=True),
                              torch.linalg.matrix_rank(a, hermitian=True)),
                   [(spd(2, 4, 4) - 5 * torch.eye(4),), (r(5, 5) + r(5, 5).mT,)]),
    "ldl_factor": (lambda a: (torch.linalg.ldl_factor(a), torch.linalg.ldl_factor_ex(a, hermitian=True)),
                   [(r(3, 5, 5),), (r(7, 7),)]),
    "matrix_exp": (lambda a: torch.linalg.matrix_exp(a), [(r(2, 4, 4),), (3 * r(6, 6),)]),
}
TOL = dict(rtol=2e-4, atol=2e-5)  # PyTorch's LAPACK works in float32; the ops compute in float64


def _module(fn):
    class M(torch.nn.Module):
        def forward(self, *xs):
            return fn(*xs)
    return M()


@pytest.mark.parametrize("target", ["interpreter", "cpu"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_linalg_matches_pytorch(name, target):
    fn, sizes = CASES[name]
    for inputs in sizes:
        compiled = cuvil.compile(_module(fn), inputs, target=target, cache=False)
        assert_close(*run_both(_module(fn), compiled, inputs), tol=TOL)


def test_symbolic_batch():
    m = _module(lambda a, b: (torch.linalg.det(a), torch.linalg.solve(a, b), torch.linalg.cholesky(a @ a.mT + 4 *
                                                                                                     torch.eye(4))))
    batch = Dim("batch")
    compiled = cuvil.compile(m, (r(3, 4, 4), r(3, 4, 2)), target="cpu", cache=False,
                             dynamic_shapes=(({0: batch}, {0: batch}),))  # forward(*xs): one argument
    for n in (1, 3, 6):
        inputs = (r(n, 4, 4), r(n, 4, 2))
        assert_close(*run_both(m, compiled, inputs), tol=TOL)


def test_singular_matrix_gives_nan_not_an_exception_or_a_value():
    """Eager PyTorch raises for a singular matrix; a compiled call has no per-matrix error, so the matrix's result is
    NaN (its neighbours in the batch are unaffected) and its determinant 0."""
    a = torch.stack([torch.ones(3, 3), torch.eye(3) * 2])
    compiled = cuvil.compile(_module(lambda a: (torch.linalg.inv(a), torch.linalg.det(a), torch.linalg.inv_ex(a))),
                             (a,), target="cpu", cache=False)
    inv, det, (inv_ex, info) = compiled(a)
    assert torch.isnan(inv[0]).all() and torch.equal(inv[1], torch.eye(3) / 2)
    assert det.tolist() == [0.0, 8.0] and info.tolist() == [2, 0] and torch.isnan(inv_ex[0]).all()


@pytest.mark.parametrize("target", ["interpreter", "cpu"])
def test_lu_solve_refuses_pivots_out_of_range(target):
    """Pivots are the caller's data: one outside [1, n] stops the call (it would move a row outside the matrix)."""
    m = _module(lambda lu, piv, b: torch.linalg.lu_solve(lu, piv, b))
    lu, piv = torch.linalg.lu_factor(r(3, 3))
    compiled = cuvil.compile(m, (lu, piv, r(3, 2)), target=target, cache=False)
    with pytest.raises(cuvil.IndexRangeError, match="index 6 is out of bounds for axis -1 with size 3"):
        compiled(lu, torch.tensor([1, 7, 3], dtype=torch.int32), r(3, 2))
