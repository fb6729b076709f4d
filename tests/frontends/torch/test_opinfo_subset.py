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
    # reductions (0-d inputs and dim=0 among the samples), norms, scans, searches
    "sum": 4, "mean": 4, "amax": 4, "median": 4, "logsumexp": 3, "nansum": 3, "norm": 4,
    "linalg.vector_norm": 4, "cumsum": 2, "cumprod": 2, "topk": 2, "searchsorted": 3, "bucketize": 2, "dist": 2,
    # movement
    "cat": 2, "permute": 1, "gather": 2, "index_select": 3, "unfold": 2, "diagonal": 2, "trace": 1, "narrow_copy": 1,
    # nn
    "matmul": 2, "addmv": 1, "softmax": 1, "nn.functional.layer_norm": 2, "nn.functional.conv2d": 1,
    "nn.functional.adaptive_avg_pool2d": 3, "nn.functional.scaled_dot_product_attention": 2,
    "nn.functional.embedding": 1,
    # linear algebra (effect tokens of the error checks among them)
    "linalg.det": 2, "linalg.slogdet": 2, "logdet": 1, "linalg.inv": 2, "linalg.solve": 3, "linalg.solve_ex": 2,
    "linalg.cholesky": 2, "linalg.lu_factor": 2, "linalg.solve_triangular": 2, "triangular_solve": 2,
    "cholesky_solve": 2, "cholesky_inverse": 1, "linalg.tensorsolve": 1, "linalg.lu": 2, "lu_solve": 2,
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
