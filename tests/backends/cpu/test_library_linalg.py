"""The linear-algebra kernels (backends/cpu/library_linalg.py) beyond the registry's cases: batches cut into chunks
that run side by side (with a symbolic batch), and the properties the SVD and eigen kernels must keep where their
factors are not unique (rank-deficient matrices, repeated eigenvalues)."""
import numpy as np
import pytest

from cuvil.compiler import compile_module
from cuvil.interpreter import interpret

from .test_library_ops import check, rand, single_op
from .test_ops_compiled import assert_matches

SQUARE_OPS = {"det": {}, "slogdet": {}, "inv": {}, "lu_factor": {}, "svd": {}, "eigh": {"upper": True}, "geqrf": {},
              "matrix_exp": {}}


@pytest.mark.parametrize("op", sorted(SQUARE_OPS))
@pytest.mark.parametrize("batch", [3, 45])  # 45 x 9^3 multiply-adds: threaded, in chunks of uneven size
def test_batch_in_chunks(op, batch):
    check(single_op(op, [rand(batch, 9, 9, seed=batch)], **SQUARE_OPS[op]), [rand(batch, 9, 9, seed=batch)])


@pytest.mark.parametrize("op", ["solve", "cholesky", "svd", "householder_product"])
def test_symbolic_batch_at_several_sizes(op):
    def inputs(n):
        a = rand(n, 6, 6, seed=n)
        spd = a @ np.swapaxes(a, -1, -2) + 6 * np.eye(6, dtype=np.float32)
        return {"solve": [a, rand(n, 6, 2)], "cholesky": [spd], "svd": [a], "householder_product": [a, rand(n, 4)]}[op]

    example = inputs(2)
    m = single_op(op, example, dims={i: {0: "n"} for i in range(len(example))})
    exe = compile_module(m)
    for n in (1, 7, 45, 0):
        assert_matches(exe(*inputs(n)), interpret(m, inputs(n)), f"{op} batch {n}")


def _orthonormal(q, tol):
    np.testing.assert_allclose(np.swapaxes(q, -1, -2) @ q, np.broadcast_to(np.eye(q.shape[-1]), q.shape[:-2] +
                                                                         (q.shape[-1],) * 2), atol=tol)


@pytest.mark.parametrize("shape", [(7, 3), (3, 7)])
def test_svd_of_rank_deficient_and_zero_matrices_keeps_orthonormal_factors(shape):
    """A zero singular value leaves its singular vector free: the kernel completes it to an orthonormal basis."""
    x = rand(*shape)
    x[..., :, 2] = x[..., :, 0] if shape[0] > shape[1] else x[..., :, 2]
    x[..., 2, :] = x[..., 0, :] if shape[0] < shape[1] else x[..., 2, :]
    for a in (x, np.zeros(shape, np.float32), np.ones(shape, np.float32)):
        u, s, vh = compile_module(single_op("svd", [a]))(a)
        _orthonormal(u, 1e-6)
        _orthonormal(np.swapaxes(vh, -1, -2), 1e-6)
        np.testing.assert_allclose((u * s) @ vh, a, atol=1e-5)
        assert np.all(np.diff(s) <= 0) and np.all(s >= 0)


def test_eigh_with_repeated_eigenvalues():
    """The identity, a matrix of ones (eigenvalue 0 four times) and a diagonal with a double eigenvalue."""
    for a in (np.eye(5), np.ones((5, 5)), np.diag([3.0, 1.0, 3.0, -2.0, 0.0])):
        a = a.astype(np.float32)
        w, v = compile_module(single_op("eigh", [a]))(a)
        _orthonormal(v, 1e-6)
        np.testing.assert_allclose(a @ v, v * w, atol=1e-5)
        np.testing.assert_allclose(w, np.linalg.eigvalsh(a), atol=1e-6)
