"""The vectorisable math of `runtime/cuvil_rt.h` against float64, with the bounds its header states:
exp <= 2 ulp (also the clamped exp that sigmoid, tanh and erf use), sigmoid <= 3 ulp (subnormal results too),
log <= 3 ulp (normal inputs), tanh absolute <= 2e-7, erf <= 6e-7; and the IEEE special cases (inf, NaN, signed
zero). Each function runs inside an `omp simd` loop, as in generated kernels, so the vector code GCC makes of it
is what is checked."""
import ctypes
import math

import numpy as np
import pytest

from cuvil.backends.cpu import toolchain
from cuvil.backends.cpu.backend import runtime_dir

FUNCTIONS = ("cuvil_expf", "cuvil_expf_normal", "cuvil_sigmoidf", "cuvil_tanhf", "cuvil_erff", "cuvil_logf")
SOURCE = '#include "cuvil_rt.h"\n' + "".join(f"""
void apply_{name}(long n, const float *restrict x, float *restrict y)
{{
#pragma omp simd
    for (long i = 0; i < n; i++) y[i] = {name}(x[i]);
}}
""" for name in FUNCTIONS)



@pytest.fixture(scope="module")
def lib():
    lib = toolchain.load_library(SOURCE, name="test-runtime-math", opt_level=3, include_dirs=[runtime_dir()])
    for name in FUNCTIONS:
        getattr(lib, f"apply_{name}").argtypes = [ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    return lib


def _apply(lib, name: str, x) -> np.ndarray:
    x = np.ascontiguousarray(x, np.float32)
    y = np.empty_like(x)
    getattr(lib, f"apply_{name}")(len(x), x.ctypes.data, y.ctypes.data)
    return y


def _inputs(lo: float, hi: float) -> np.ndarray:
    """A dense grid, uniform random values and every float32 exponent in [lo, hi]."""
    mags = 2.0 ** np.arange(-30, 8, 0.37)
    extra = np.concatenate([mags, -mags, [0.0, -0.0]])
    x = np.concatenate([np.linspace(lo, hi, 200_001), np.random.default_rng(0).uniform(lo, hi, 200_000), extra])
    return x[(x >= lo) & (x <= hi)].astype(np.float32)


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return np.abs(got.astype(np.float64) - want) / np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)


def _sigmoid(x):
    return np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x))))


@pytest.mark.parametrize("name, ref, lo, hi, ulps", [
    ("cuvil_expf", np.exp, -87.3, 88.7, 2),
    ("cuvil_expf_normal", np.exp, -87.3, 88.3, 2),
    ("cuvil_sigmoidf", _sigmoid, -88.3, 100.0, 3),
    ("cuvil_logf", np.log, 1.2e-38, 3e38, 3),
])
def test_relative_error_in_ulps(lib, name, ref, lo, hi, ulps):
    x = _inputs(lo, hi)
    if name == "cuvil_logf":  # every binade of the normal floats
        x = (2.0 ** np.random.default_rng(1).uniform(-126, 127.9, 400_000)).astype(np.float32)
    got, want = _apply(lib, name, x), ref(x.astype(np.float64))
    worst = _ulps(got, want).max()
    assert worst <= ulps, f"{name}: {worst:.2f} ulp at x = {x[np.argmax(_ulps(got, want))]!r}"


@pytest.mark.parametrize("name, ref, bound", [("cuvil_tanhf", np.tanh, 2e-7),
                                              ("cuvil_erff", np.vectorize(math.erf), 6e-7)])
def test_absolute_error(lib, name, ref, bound):
    x = _inputs(-9.0, 9.0)[::4]
    err = np.abs(_apply(lib, name, x).astype(np.float64) - ref(x.astype(np.float64)))
    assert err.max() <= bound, f"{name}: {err.max():.2e} at x = {x[np.argmax(err)]!r}"


@pytest.mark.parametrize("name, inputs, want", [
    ("cuvil_expf", [np.inf, -np.inf, np.nan, 89.0, -105.0, 0.0], [np.inf, 0.0, np.nan, np.inf, 0.0, 1.0]),
    ("cuvil_expf_normal", [np.inf, np.nan, 88.5, 0.0, -0.0], [np.inf, np.nan, np.inf, 1.0, 1.0]),
    ("cuvil_sigmoidf", [np.inf, -np.inf, np.nan, 0.0, -0.0, 200.0, -89.0], [1.0, 0.0, np.nan, 0.5, 0.5, 1.0, 0.0]),
    ("cuvil_tanhf", [np.inf, -np.inf, np.nan, 0.0, -0.0], [1.0, -1.0, np.nan, 0.0, -0.0]),
    ("cuvil_erff", [np.inf, -np.inf, np.nan, -0.0], [1.0, -1.0, np.nan, -0.0]),
    ("cuvil_logf", [0.0, -1.0, np.inf, np.nan, 1.0, 1e-42],
     [-np.inf, np.nan, np.inf, np.nan, 0.0, math.log(float(np.float32(1e-42)))]),
])
def test_special_values(lib, name, inputs, want):
    got = _apply(lib, name, np.array(inputs, np.float32))
    np.testing.assert_allclose(got, np.array(want, np.float32), rtol=1e-6)
    assert np.array_equal(np.signbit(got), np.signbit(np.array(want, np.float32)))
