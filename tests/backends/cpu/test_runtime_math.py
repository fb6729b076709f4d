"""The transcendentals of `kernels/cuvil_math.inc` against float64, with the bounds it states, in both forms: the
scalar one of `runtime/cuvil_rt.h` inside an `omp simd` loop, as in generated kernels (so the vector code GCC makes
of it is what is checked), and the vector one of `kernels/cuvil_simd.h` that the kernel library's epilogues use.
exp <= 2 ulp (also the clamped exp that sigmoid, tanh and erf use), sigmoid <= 3 ulp (subnormal results too),
log <= 3 ulp (normal inputs, scalar only), tanh absolute <= 2e-7, erf <= 6e-7, gelu <= 4e-7 max(1, |x|); and the
IEEE special cases (inf, NaN, signed zero, subnormal inputs)."""
import ctypes
import math

import numpy as np
import pytest

from cuvil.backends.cpu import kernels, toolchain
from cuvil.backends.cpu.backend import runtime_dir

FUNCTIONS = ("cuvil_expf", "cuvil_exp_normalf", "cuvil_sigmoidf", "cuvil_tanhf", "cuvil_erff", "cuvil_logf",
             "cuvil_gelu_tanhf", "cuvil_gelu_erff", "cuvil_hardswishf")
SCALAR = '#include "cuvil_rt.h"\n' + "".join(f"""
void apply_{name}(long n, const float *restrict x, float *restrict y)
{{
#pragma omp simd
    for (long i = 0; i < n; i++) y[i] = {name}(x[i]);
}}
""" for name in FUNCTIONS)
VECTOR = '#include <string.h>\n#include "cuvil_simd.h"\n' + "".join(f"""
void apply_{name}(long n, const float *x, float *y)
{{
    long i = 0;
    for (; i + CUVIL_VL <= n; i += CUVIL_VL) cuvil_store(y + i, cuvil_v_{name[6:-1]}(cuvil_load(x + i)));
    if (i < n) {{
        float t[CUVIL_VL] = {{0}};
        memcpy(t, x + i, sizeof(float) * (n - i));
        cuvil_store(t, cuvil_v_{name[6:-1]}(cuvil_load(t)));
        memcpy(y + i, t, sizeof(float) * (n - i));
    }}
}}
""" for name in FUNCTIONS if name != "cuvil_logf")


@pytest.fixture(scope="module", params=["scalar", "vector"])
def lib(request):
    source = SCALAR if request.param == "scalar" else VECTOR
    headers = [runtime_dir() / "cuvil_rt.h", *(kernels.include_dir() / n for n in ("cuvil_math.inc", "cuvil_simd.h"))]
    lib = toolchain.load_library(source, name=f"test-runtime-math-{request.param}", opt_level=3,
                                 include_dirs=[runtime_dir(), kernels.include_dir()], depends=headers)
    for name in FUNCTIONS:
        fn = getattr(lib, f"apply_{name}", None)
        if fn is not None:
            fn.argtypes = [ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
    return lib


def _apply(lib, name: str, x) -> np.ndarray:
    fn = getattr(lib, f"apply_{name}", None)
    if fn is None:
        pytest.skip(f"{name} has no vector form")
    x = np.ascontiguousarray(x, np.float32)
    y = np.empty_like(x)
    fn(len(x), x.ctypes.data, y.ctypes.data)
    return y


def _inputs(lo: float, hi: float) -> np.ndarray:
    """A dense grid, uniform random values and every float32 exponent in [lo, hi]."""
    mags = 2.0 ** np.arange(-30, 8, 0.37)
    extra = np.concatenate([mags, -mags, [0.0, -0.0, 1e-40, -1e-40, 1e-45, -1.2e-38]])
    x = np.concatenate([np.linspace(lo, hi, 200_001), np.random.default_rng(0).uniform(lo, hi, 200_000), extra])
    return x[(x >= lo) & (x <= hi)].astype(np.float32)


def _ulps(got: np.ndarray, want: np.ndarray) -> np.ndarray:
    return np.abs(got.astype(np.float64) - want) / np.spacing(np.abs(want).astype(np.float32)).astype(np.float64)


def _sigmoid(x):
    return np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x))))


@pytest.mark.parametrize("name, ref, lo, hi, ulps", [
    ("cuvil_expf", np.exp, -87.3, 88.7, 2),
    ("cuvil_exp_normalf", np.exp, -87.3, 88.3, 2),
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


def _gelu_tanh(x):
    return 0.5 * x * (1 + np.tanh(0.7978845608028654 * (x + 0.044715 * x ** 3)))


def _gelu_erf(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


@pytest.mark.parametrize("name, ref", [("cuvil_gelu_tanhf", _gelu_tanh), ("cuvil_gelu_erff", _gelu_erf)])
def test_gelu_error(lib, name, ref):
    x = _inputs(-12.0, 12.0)[::4]
    err = np.abs(_apply(lib, name, x).astype(np.float64) - ref(x.astype(np.float64)))
    scaled = err / np.maximum(1.0, np.abs(x))
    assert scaled.max() <= 4e-7, f"{name}: {scaled.max():.2e} at x = {x[np.argmax(scaled)]!r}"


@pytest.mark.parametrize("name, inputs, want", [
    ("cuvil_expf", [np.inf, -np.inf, np.nan, 89.0, -105.0, 0.0, 1e-40, -100.0],
     [np.inf, 0.0, np.nan, np.inf, 0.0, 1.0, 1.0, math.exp(-100.0)]),
    ("cuvil_exp_normalf", [np.inf, np.nan, 88.8, 0.0, -0.0], [np.inf, np.nan, np.inf, 1.0, 1.0]),
    ("cuvil_sigmoidf", [np.inf, -np.inf, np.nan, 0.0, -0.0, 200.0, -89.0], [1.0, 0.0, np.nan, 0.5, 0.5, 1.0, 0.0]),
    ("cuvil_tanhf", [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-40, -1e-40], [1.0, -1.0, np.nan, 0.0, -0.0, 1e-40, -1e-40]),
    ("cuvil_erff", [np.inf, -np.inf, np.nan, -0.0], [1.0, -1.0, np.nan, -0.0]),
    ("cuvil_gelu_tanhf", [np.inf, np.nan, 0.0, -0.0], [np.inf, np.nan, 0.0, -0.0]),
    ("cuvil_gelu_erff", [np.inf, np.nan, 0.0, -0.0], [np.inf, np.nan, 0.0, -0.0]),
    ("cuvil_hardswishf", [np.nan, np.inf, -np.inf, -3.0, -2.0, 3.0, 1.5, -0.0],  # the clamp of x / 6 + 1/2
     [np.nan, np.inf, np.nan, -0.0, -1.0 / 3.0, 3.0, 1.125, -0.0]),
    ("cuvil_logf", [0.0, -1.0, np.inf, np.nan, 1.0, 1e-42],
     [-np.inf, np.nan, np.inf, np.nan, 0.0, math.log(float(np.float32(1e-42)))]),
])
def test_special_values(lib, name, inputs, want):
    got = _apply(lib, name, np.array(inputs, np.float32))
    np.testing.assert_allclose(got, np.array(want, np.float32), rtol=1e-6)
    numbers = ~np.isnan(got)  # a NaN's sign is not specified by IEEE 754 arithmetic
    assert np.array_equal(np.signbit(got)[numbers], np.signbit(np.array(want, np.float32))[numbers])
