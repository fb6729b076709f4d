"""The 16-bit-weight GEMM (gemm_lowp.c) on every path this CPU runs, the others forced by `use_path`, against NumPy:
the portable path (and every path below 8 rows) equals the fp32 product with the rounded weight (rtol 1e-5), the bf16
dot-product paths equal it with A rounded to bf16 as well (rtol 1e-4: fp32 accumulation in another order)."""
import os
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from cuvil.backends.cpu import kernels, kernels_lowp

SHAPES = [(1, 784, 1024), (1, 33, 10), (2, 64, 40), (5, 33, 17), (6, 77, 100), (17, 64, 48), (64, 100, 50),
          (130, 96, 33), (3, 1, 16)]
PATHS = ("generic", "avx512_bf16", "amx_bf16")
ROUND = {"bf16": ml_dtypes.bfloat16, "fp16": np.float16}


def _case(m, k, n, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((k, n)).astype(np.float32),
            rng.standard_normal(n).astype(np.float32))


def _rounded(x, precision):
    return x.astype(ROUND[precision]).astype(np.float64)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("shape", SHAPES)
def test_bf16_gemm_on_each_path(path, shape):
    a, w, bias = _case(*shape)
    packed = kernels_lowp.PackedLowp(w, "bf16", opt_level=1)
    with kernels_lowp.use_path(path, opt_level=1) as used:
        got = kernels_lowp.lowp_gemm(a, packed, bias=bias, act="relu")
    if used != path:
        pytest.skip(f"this CPU runs {used}, not {path}")
    rounds_a = path != "generic" and shape[0] >= 8  # below 8 rows every path widens; AMX below 16 is AVX512_BF16
    lhs = _rounded(a, "bf16") if rounds_a else a.astype(np.float64)
    want = np.maximum(lhs @ _rounded(w, "bf16") + bias, 0)
    np.testing.assert_allclose(got, want, rtol=1e-4 if rounds_a else 1e-5, atol=1e-4)


@pytest.mark.parametrize("shape", SHAPES)
def test_fp16_gemm_widens_the_weight(shape):
    a, w, bias = _case(*shape, seed=1)
    got = kernels_lowp.lowp_gemm(a, kernels_lowp.PackedLowp(w, "fp16", opt_level=1), bias=bias)
    np.testing.assert_allclose(got, a.astype(np.float64) @ _rounded(w, "fp16") + bias, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("m", [1, 7, 8, 40])
def test_a_weight_packed_for_the_portable_path_keeps_an_fp32_copy(m):
    """Packed where no dot-product path runs, 8 rows and more take the fp32 GEMM on a widened copy: the same result
    as the 16-bit panels (the weight's rounding only), at fp32 speed."""
    a, w, bias = _case(m, 70, 40, seed=3)
    with kernels_lowp.use_path("generic", opt_level=1):
        packed = kernels_lowp.PackedLowp(w, "bf16", opt_level=1)
        got = kernels_lowp.lowp_gemm(a, packed, bias=bias)
    assert packed.data[0] == 1  # the copy is there
    np.testing.assert_allclose(got, a.astype(np.float64) @ _rounded(w, "bf16") + bias, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("m", [3, 40])  # the register-widening path below 8 rows, the fp32 copy above
def test_strided_left_operand_and_activations(m):
    a, w, bias = _case(m, 24, 20, seed=2)
    at = np.asfortranarray(a)  # read through strides (rs = 1)
    got = kernels_lowp.lowp_gemm(at, kernels_lowp.PackedLowp(w, "fp16", opt_level=1), act="sigmoid")
    np.testing.assert_allclose(got, 1 / (1 + np.exp(-(a.astype(np.float64) @ _rounded(w, "fp16")))), rtol=1e-5,
                               atol=1e-6)


def test_a_path_the_cpu_lacks_falls_back_to_one_it_has():
    with kernels_lowp.use_path("amx_bf16", opt_level=1) as used:
        assert used in PATHS
        assert PATHS.index(used) <= PATHS.index(kernels.lowp_path(1))
    with kernels_lowp.use_path("generic", opt_level=1) as used:
        assert used == "generic"


@pytest.mark.parametrize("mask, best", [("amx_bf16", "avx512_bf16"), ("amx_bf16,avx512_bf16", "generic")])
def test_disabled_features_mask_the_choice(mask, best, tmp_path):
    env = {**os.environ, "CUVIL_DISABLE_CPU_FEATURES": mask}
    code = "from cuvil.backends.cpu import kernels; print(kernels.lowp_path(1))"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(__file__)))))
    unmasked = kernels.lowp_path(1)
    assert out.stdout.strip() == (best if PATHS.index(best) <= PATHS.index(unmasked) else unmasked)
