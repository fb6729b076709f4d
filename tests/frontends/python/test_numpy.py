"""Every supported construct on NumPy inputs, compared with running the original Python function."""
import numpy as np
import pytest

import cuvil

from .helpers import TARGET, check, f32, i64

X, Y, M, V = f32(3, 4), f32(3, 4), f32(4, 5), f32(4)
B3 = f32(2, 3, 4)
I = i64(3, 4)


# -- operators, broadcasting, promotion --------------------------------------------------------------------------------
def arith(x, y):
    return x + y, x - y, x * y, x / (y + 3.0), -x, +x, x ** 2, 2.0 ** x, (x * 3) // 2, x % 1.5


def broadcast(x, v):
    return x + v, v[None, :] * x, x[:, :1] - v


def scalars(x):
    return x * 2.0, 3 - x, x / 4, 1.0 / (x + 5.0)


def int_ops(a, b):
    return a + b, a * 2, a // 2, a % 3, a / 2, a - 1.5


def promote(x, a):
    return x + a, a * 0.5, x.astype(np.float64) + x, a.astype(np.int32) + a


def comparisons(x, y):
    return x < y, x <= 0.5, x > y, x >= y, x == y, x != 0, (x > 0) & (y < 0), (x > 0) | (y > 0), ~(x > 0), \
        (x > 0) ^ (y > 0)


def chained(x):
    return (-1 < x) & (x < 1)


def matmul_ops(x, m, v):
    return x @ m, x @ v, v @ m, v @ v, np.matmul(x, m), np.dot(x, m)


def batched(b, m):
    return b @ m, np.einsum("bij,jk->bik", b, m)


@pytest.mark.parametrize("fn,args", [
    (arith, (X, Y)), (broadcast, (X, V)), (scalars, (X,)), (int_ops, (I, I + 1)), (promote, (X, I)),
    (comparisons, (X, Y)), (chained, (X,)), (matmul_ops, (X, M, V)), (batched, (B3, M)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_operators(fn, args):
    check(fn, *args)


def test_weak_scalars_keep_float32():
    out = cuvil.jit(scalars, target=TARGET)(X)
    assert all(o.dtype == np.float32 for o in out)


# -- indexing ----------------------------------------------------------------------------------------------------------
def basic_index(x):
    return x[0], x[-1], x[1:], x[:, 1], x[::2], x[::-1], x[:, -2:], x[1, 2], x[-1, ::-2]


def newaxis(x):
    return x[None], x[:, None, :], x[..., None], x[np.newaxis, ..., 1], x[...]


def tensor_index(x, i):
    return x[i], x[[0, 2]], x[:, [3, 0, 1]], np.take(x, [1, 1], axis=1)


def shape_index(x):
    n = x.shape[0]
    return x[n - 1], x[: n // 2], x.shape[1] * x, x[: x.shape[0] - 1, 1:-1]


@pytest.mark.parametrize("fn,args", [
    (basic_index, (X,)), (newaxis, (X,)), (tensor_index, (X, np.array([2, 0, 0]))), (shape_index, (X,)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_indexing(fn, args):
    check(fn, *args)


# -- methods and numpy functions ---------------------------------------------------------------------------------------
def reductions(x):
    return (x.sum(), x.sum(axis=0), x.mean(axis=1, keepdims=True), x.max(), x.min(axis=-1), x.prod(axis=0),
            x.argmax(), x.argmin(axis=1), np.sum(x, axis=(0, 1)), np.amax(x, 0), np.mean(x), x.var(), x.std(axis=0),
            np.var(x, axis=1, ddof=1), (x > 0).any(), np.all(x > -3, axis=0), np.cumsum(x, axis=1))


def int_reductions(a):
    return a.sum(), a.mean(), np.sum(a.astype(np.int32), axis=0), a.max(axis=1), np.cumsum(a)


def movement(x, b):
    return (x.reshape(4, 3), x.reshape((2, -1)), x.T, x.transpose(), b.transpose(2, 0, 1), np.transpose(b, (1, 0, 2)),
            np.expand_dims(x, 1), np.squeeze(x[None]), x.flatten(), np.ravel(b), np.swapaxes(b, 0, 2),
            np.broadcast_to(x[:1], (3, 4)), np.tile(x, (2, 1)), np.concatenate([x, x], axis=1), np.stack([x, x]),
            np.concatenate((x, x)), x.reshape(-1, 2).shape, x.ndim, x.size)


def elementwise(x):
    p = np.abs(x) + 0.5
    return (np.exp(x), np.log(p), np.sqrt(p), np.tanh(x), np.sin(x), np.cos(x), np.floor(x), np.ceil(x),
            np.round(x), np.sign(x), np.negative(x), np.square(x), np.log2(p), np.log1p(p), np.expm1(x),
            np.maximum(x, 0), np.minimum(x, 0.5), np.clip(x, -1, 1), x.clip(0.0, None), np.where(x > 0, x, 0.0),
            np.power(p, 1.5), np.reciprocal(p), np.abs(x).round(1), np.isnan(x), np.logical_not(x > 0))


def inverse_and_hyperbolic(x):
    u = np.clip(x, -0.9, 0.9)
    return (np.arcsin(u), np.arccos(u), np.arctan(x), np.sinh(x), np.cosh(x), np.arcsinh(x), np.arccosh(np.abs(x) + 1),
            np.arctanh(u), np.log10(np.abs(x) + 1), np.exp2(x), np.log1p(x * 1e-6) * 1e6, np.expm1(x * 1e-6) * 1e6)


def creation(x):
    return np.zeros((2, 3)), np.ones(3, np.float32), np.full((2,), 7), np.zeros_like(x), np.ones_like(x),
    np.full_like(x, 2.5), np.arange(5) * 2, np.array([1.0, 2.0], np.float32) + x[0, :2], np.float32(2.0) * x


def split_parts(x):
    a, b = np.split(x, 2, axis=1)
    return a - b, np.split(x, [1], axis=0)[1]


def flips_rolls_pads(x):
    return (np.flip(x, 0), np.flip(x), np.fliplr(x), np.flipud(x), np.roll(x, 1, axis=1), np.roll(x, -2),
            np.roll(x, (1, 2), axis=(0, 1)), np.moveaxis(x[None], 0, -1), np.outer(x[0], x[1]), np.diff(x, axis=1),
            np.diff(x, n=2, axis=0), np.pad(x, ((1, 0), (2, 1))), np.pad(x, 1, mode="reflect"),
            np.pad(x, (1, 2), mode="edge"), np.pad(x, 2, constant_values=3.5), np.repeat(x, 2, axis=0),
            np.repeat(x, 3), x.repeat(2, axis=-1))


def rounding_counting_norms(x):
    return (np.trunc(x * 3), np.fix(x * 3), np.rint(x * 3), np.count_nonzero(x > 0),
            np.count_nonzero(x > 0, axis=1), np.isclose(x, x + 1e-7), np.linalg.norm(x), np.linalg.norm(x, axis=-1),
            np.linalg.norm(x, axis=0, keepdims=True), x.clip(min=-1), x.clip(max=0.5))


@pytest.mark.parametrize("fn,args", [
    (reductions, (X,)), (int_reductions, (I,)), (movement, (X, B3)), (elementwise, (X,)), (creation, (X,)),
    (inverse_and_hyperbolic, (X,)), (split_parts, (X,)), (flips_rolls_pads, (X,)), (rounding_counting_norms, (X,)),
], ids=lambda v: getattr(v, "__name__", ""))
def test_methods_and_functions(fn, args):
    check(fn, *args)


# -- Python-level values: locals, tuples, defaults, keywords, builtins, comprehensions ---------------------------------
def tuples(x, y):
    pair = (x, y)
    a, b = pair
    _, *rest = (a, b, a + b)
    (p, q), r = (a, b), rest[1]
    return r - p * q, len(rest), pair[1]


def defaults(x, scale=2.0, *, shift=1.0, axis=None):
    return x.sum(axis=axis) * scale + shift


def builtins_use(x):
    n = len(x)
    rows = [x[i] * i for i in range(n)]
    total = sum(rows)
    return total, max(x.sum(), x.mean()), min(3, 4) * abs(-2) * x, float(x.mean()) + x, tuple(x.shape), \
        [r.sum() for r in rows if True], list(zip(range(2), "ab")), x.shape[-1], isinstance(x, np.ndarray)


def value_methods(x):
    axis = x.shape.index(4)
    return x.sum(axis=axis), "{}x{}".format(*x.shape), {"k": 2}.get("k") * x


def aug(x):
    y = x * 1.0
    y += 1.0
    y *= x
    y -= 2
    y /= 4.0
    return y, x


def ifexp(x, flag=True):
    a = x if flag else -x
    b = np.where(x > 0, x, 0) if x.ndim == 2 else x
    c = x if x.mean() > 100 else x * 2
    return a, b, c


@pytest.mark.parametrize("fn,args,kwargs", [
    (tuples, (X, Y), {}), (defaults, (X,), {}), (defaults, (X, 3.0), {"shift": -1.0, "axis": 1}),
    (builtins_use, (X,), {}), (value_methods, (X,), {}), (aug, (X,), {}), (ifexp, (X,), {}), (ifexp, (X, False), {}),
], ids=lambda v: getattr(v, "__name__", "") if callable(v) else "")
def test_python_values(fn, args, kwargs):
    check(fn, *args, **kwargs)


@cuvil.jit
def helper(x, k=2):
    if x.sum() > 0:
        return x * k
    return x - k


def calls_helper(x):
    return helper(x) + helper(x, k=3) + helper(-x)


WEIGHTS = f32(4, 4)


def uses_global(x):
    return x @ WEIGHTS + np.pi


def test_inlines_jit_functions_and_reads_globals():
    check(calls_helper, X)
    check(uses_global, X)
