"""Long float reductions stay accurate: every reduction kind over 2^26 elements, compiled, against float64 and
against NumPy's own float32 error (pairwise summation). A float accumulator stops growing at 2^24 times its
increment, so 2^26 + 8 ones once summed to 2^25; blocked accumulation keeps the exact count and NumPy's bound."""
import math

import numpy as np
import pytest

import cuvil
from cuvil.ir import Builder, Module, TensorType, sym

N = 1 << 26
ROWS = (1 << 23) + 1  # the issue's (2^23 + 1, 8): 67,108,872 elements, exactly representable in f32


@pytest.fixture(scope="module")
def ones():
    return np.ones(ROWS * 8, np.float32)


@pytest.fixture(scope="module")
def noise():
    return np.random.default_rng(0).random(ROWS * 8, dtype=np.float32)


def _rel(got, want) -> float:
    return float(np.max(np.abs(np.asarray(got, np.float64) - want) / np.abs(want)))


def _close_to_numpy(got, numpy_got, want) -> None:
    """`got` within a small multiple of NumPy's float32 error, or of the result's own rounding."""
    bound = 4 * max(_rel(numpy_got, want), 2.0 ** -24)
    assert _rel(got, want) <= bound, (got, numpy_got, want)


def total(x):
    return x.sum()


def mean(x):
    return x.mean()


def l1(x):
    return np.abs(x).sum()


def l2(x):
    return np.linalg.norm(x)


def sum_square(x):
    return (x * x).sum()


def var(x):
    return x.var()


def std(x):
    return x.std()


def prod(x):
    return x.prod()


def largest(x):
    return x.max()


def smallest(x):
    return x.min()


def column_sums(x):
    return x.sum(axis=0)


def row_sums(x):
    return x.sum(axis=1)


# name -> (the reduction, as NumPy and @cuvil.jit both run it; the float64 reference)
KINDS = {
    "sum": (total, lambda w: w.sum()),
    "mean": (mean, lambda w: w.mean()),
    "l1": (l1, lambda w: np.abs(w).sum()),
    "l2": (l2, lambda w: np.sqrt((w * w).sum())),
    "sum-square": (sum_square, lambda w: (w * w).sum()),
    "var": (var, lambda w: w.var()),
    "std": (std, lambda w: w.std()),
}


@pytest.mark.parametrize("kind", KINDS)
def test_full_reduction_of_noise_is_as_accurate_as_numpy(kind, noise):
    fn, ref = KINDS[kind]
    x = noise[:N]
    _close_to_numpy(cuvil.jit(fn)(x), fn(x), ref(x.astype(np.float64)))


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_issue_shape_counts_every_one(dynamic, ones, noise):
    compiled = cuvil.jit(total, dynamic=dynamic)
    assert float(compiled(ones.reshape(ROWS, 8))) == ROWS * 8 == 67_108_872
    x = noise.reshape(ROWS, 8)
    _close_to_numpy(compiled(x), x.sum(), np.sum(x, dtype=np.float64))


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_mean_of_ones_is_one(dynamic, ones):
    assert float(cuvil.jit(mean, dynamic=dynamic)(ones[:N])) == 1.0


def test_prod_and_extremes_are_exact(ones, noise):
    assert float(cuvil.jit(prod)(ones[:N])) == 1.0
    x = noise[:N]
    assert float(cuvil.jit(largest)(x)) == x.max()
    assert float(cuvil.jit(smallest)(x)) == x.min()


@pytest.mark.parametrize("axis", [0, 1])
def test_row_and_column_sums(axis, ones, noise):
    shape = (8, N // 8) if axis == 1 else (ROWS, 8)
    compiled = cuvil.jit(row_sums if axis == 1 else column_sums)
    np.testing.assert_array_equal(compiled(ones[:ROWS * 8 if axis == 0 else N].reshape(shape)),
                                  np.full(8, shape[axis], np.float32))
    x = noise[:ROWS * 8 if axis == 0 else N].reshape(shape)
    rows = np.ascontiguousarray(x.T) if axis == 0 else x  # NumPy sums contiguous rows pairwise, columns in order
    _close_to_numpy(compiled(x), rows.sum(axis=1), np.sum(rows, axis=1, dtype=np.float64))


def _one_op(name: str, shape, dtype: str = "f32", **attrs) -> Module:
    m = Module()
    b = Builder.new_function(m, "main", [TensorType(dtype, shape)], ["x"])
    b.ret(getattr(b, name)(b.args[0], **attrs))
    return m


@pytest.mark.parametrize("shape", [(N,), (sym("n"),)], ids=["static", "dynamic"])
def test_logsumexp(shape, noise):
    x = noise[:N]
    got = cuvil.compile_module(_one_op("logsumexp", shape, axes=(0,), keepdims=False))(x)[0]
    w = x.astype(np.float64)
    numpy_f32 = np.log(np.exp(x - x.max()).sum()) + x.max()
    _close_to_numpy(got, numpy_f32, np.log(np.exp(w - w.max()).sum()) + w.max())


@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_of_a_long_row(name, noise):
    """The row kernel's denominator: 2^26 terms."""
    x = noise[:N].reshape(1, N)
    got = cuvil.compile_module(_one_op(name, x.shape, axis=1))(x)[0]
    w = x.astype(np.float64)
    shift = np.log(np.exp(w - w.max()).sum()) + w.max()
    want = w - shift if name == "log_softmax" else np.exp(w - shift)
    assert _rel(got, want) < 1e-6


def test_layer_norm_of_a_long_row(noise):
    x = noise[:N].reshape(1, N)
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", x.shape), TensorType("f32", (N,))], ["x", "scale"])
    b.ret(b.layer_norm(*b.args, axis=1, epsilon=1e-5))
    got = cuvil.compile_module(m)(x, np.ones(N, np.float32))[0]
    w = x.astype(np.float64)
    want = (w - w.mean()) / np.sqrt(w.var() + 1e-5)
    assert float(np.max(np.abs(got - want))) < 1e-5


def test_f64_sum_keeps_its_precision():
    """Double blocks add into a long double: 4096 blocks summed in double would lose a few ulp that NumPy keeps."""
    x = np.random.default_rng(1).random(1 << 24)
    exact = math.fsum(x)
    got = cuvil.compile_module(_one_op("reduce_sum", x.shape, "f64", axes=(0,), keepdims=False))(x)[0]
    assert abs(float(got) - exact) / exact <= 4 * max(abs(float(x.sum()) - exact) / exact, 2.0 ** -53)
