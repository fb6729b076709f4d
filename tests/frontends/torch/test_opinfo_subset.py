"""A fast subset of PyTorch's OpInfo sweep (`python -m bench.opinfo` runs all of it): ops of every family that
pass today, each sample wrapped in a module, exported, converted, interpreted and compared with eager PyTorch.
A wrong value, an internal error or a new refusal fails; the ops whose earlier bugs the sweep found are here."""
from __future__ import annotations

import warnings

import pytest

pytest.importorskip("expecttest")  # op_db needs it

from bench import opinfo  # noqa: E402

# op_db name (with its variant) -> samples to run: more where a later sample is the one that found a bug
SUBSET = {
    # elementwise, promotion, special functions
    "add": 2, "mul": 2, "div.floor_rounding": 2, "remainder": 1, "pow": 2, "exp": 1, "log1p": 1, "atan2": 1,
    "sigmoid": 1, "nn.functional.gelu": 1, "clamp": 2, "where": 1, "lgamma": 2, "digamma": 2, "erfinv": 2,
    "polygamma.polygamma_n_2": 2, "special.zeta": 1, "mvlgamma.mvlgamma_p_3": 1, "special.ndtri": 1,
    "special.log_ndtr": 1, "special.erfcx": 1, "special.i0e": 1, "special.i1": 1, "i0": 1, "xlogy": 2, "sinc": 1,
    "logit": 2, "special.entr": 1, "signbit": 1, "ldexp": 1,
    # orthogonal polynomials: 0-d and broadcast samples; the third has a degree in (-1, 0), which truncates to 0
    "special.chebyshev_polynomial_t": 4, "special.shifted_chebyshev_polynomial_w": 3,
    "special.hermite_polynomial_he": 3, "special.laguerre_polynomial_l": 3, "special.legendre_polynomial_p": 3,
    "special.bessel_j0": 1, "special.bessel_y1": 1, "special.modified_bessel_k0": 1,
    "special.scaled_modified_bessel_k1": 1, "special.spherical_bessel_j0": 1, "special.airy_ai": 1,
    # reductions (0-d inputs and dim=0 among the samples), norms, scans, searches
    "sum": 4, "mean": 4, "amax": 4, "median": 4, "nanmedian": 4, "logsumexp": 3, "nansum": 3, "norm": 4,
    "linalg.vector_norm": 4, "cumsum": 2, "cumprod": 2, "cummax": 3, "cummin": 3, "logcumsumexp": 3, "topk": 2,
    "searchsorted": 3, "bucketize": 2, "dist": 2,
    # movement
    "cat": 2, "permute": 1, "gather": 2, "index_select": 3, "unfold": 2, "diagonal": 2, "trace": 1, "narrow_copy": 1,
    # nn
    "matmul": 2, "addmv": 1, "softmax": 1, "nn.functional.layer_norm": 2, "nn.functional.conv2d": 1,
    "nn.functional.adaptive_avg_pool2d": 3, "nn.functional.scaled_dot_product_attention": 2,
    "nn.functional.embedding": 1,
    # training-mode norms: batch statistics, the running statistics (user inputs) updated in place
    "nn.functional.batch_norm": 3, "nn.functional.instance_norm": 3, "_batch_norm_with_update": 2,
    "native_batch_norm": 3, "_native_batch_norm_legit": 3,
    # linear algebra (effect tokens of the error checks among them)
    "linalg.det": 2, "linalg.slogdet": 2, "logdet": 1, "linalg.inv": 2, "linalg.solve": 3, "linalg.solve_ex": 2,
    "linalg.cholesky": 2, "linalg.lu_factor": 2, "linalg.solve_triangular": 2, "triangular_solve": 2,
    "cholesky_solve": 2, "cholesky_inverse": 1, "linalg.tensorsolve": 1, "linalg.lu": 2, "lu_solve": 2,
    "linalg.qr": 3, "geqrf": 2, "ormqr": 3, "linalg.householder_product": 3, "linalg.svd": 1, "linalg.svdvals": 3,
    "linalg.cond": 2, "linalg.matrix_rank": 3, "linalg.matrix_rank.hermitian": 3, "norm.nuc": 2, "linalg.pinv": 3,
    "linalg.pinv.hermitian": 3, "linalg.pinv.singular": 2, "linalg.eigh": 2, "linalg.eigvalsh": 3, "matrix_exp": 1,
    "linalg.ldl_factor": 3, "linalg.ldl_factor_ex": 3,
    "index_reduce.prod": 4, "index_reduce.mean": 4, "index_reduce.amax": 4, "index_reduce.amin": 4,
    "scatter_reduce.mean": 4, "scatter_reduce.amin": 4, "nn.functional.max_pool2d": 4,
    "nn.functional.adaptive_max_pool3d": 2,
    # complex and FFT (complex64 results, odd and even lengths among the samples)
    "fft.fft": 2, "fft.ifft": 2, "fft.rfft": 2, "fft.irfft": 2, "fft.hfft": 2, "fft.ihfft": 2, "fft.fftn": 2,
    "fft.rfftn": 2, "fft.irfftn": 2, "fft.hfft2": 2, "fft.ihfftn": 2, "view_as_complex": 1, "polar": 1, "complex": 1,
}


@pytest.fixture(scope="module")
def ops_by_name() -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return {opinfo.full_name(o): o for o in opinfo.float32_ops()}


@pytest.mark.parametrize("name", sorted(SUBSET))
def test_opinfo_samples_pass(name, ops_by_name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        outcome, detail = opinfo.op_outcome(ops_by_name[name], SUBSET[name], target="interpreter")
    assert outcome == "pass", f"{name}: {outcome}: {detail}"
