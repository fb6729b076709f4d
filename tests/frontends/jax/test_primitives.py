"""Each primitive family through jaxpr -> Cuvil IR -> interpreter, compared with jax.jit on the CPU.

Tolerances: float32 rtol 1e-4, atol 1e-5 (the interpreter rounds once from float64, XLA after each op);
float16 rtol 1e-2; integers and bools exactly.
"""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

from cuvil.frontends.jax import jit  # noqa: E402

TOLERANCES = {np.dtype(np.float32): dict(rtol=1e-4, atol=1e-5), np.dtype(np.float16): dict(rtol=1e-2, atol=1e-3),
              np.dtype(np.float64): dict(rtol=1e-10, atol=1e-12)}
rng = np.random.default_rng(0)


def r(*shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def ints(*shape, hi=5):
    return rng.integers(0, hi, shape).astype(np.int32)


def check(fn, *args):
    """Compile with cuvil (interpreter) and compare every output with jax.jit's."""
    got = jit(fn, target="interpreter")(*args)
    expected = jax.jit(fn)(*args)
    got_leaves, expected_leaves = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(expected)
    assert jax.tree_util.tree_structure(got) == jax.tree_util.tree_structure(expected)
    for g, e in zip(got_leaves, expected_leaves):
        g, e = np.asarray(g), np.asarray(e)
        assert g.dtype == e.dtype and g.shape == e.shape, (g.dtype, e.dtype, g.shape, e.shape)
        if e.dtype.kind == "f":
            np.testing.assert_allclose(g, e, **TOLERANCES[e.dtype])
        else:
            np.testing.assert_array_equal(g, e)


def conv_nhwc(x, w):
    return lax.conv_general_dilated(x, w, (2, 1), ((1, 1), (0, 2)), rhs_dilation=(1, 2),
                                    dimension_numbers=("NHWC", "HWIO", "NHWC"))


def attention(q, k, v):
    scores = jnp.einsum("bqd,bkd->bqk", q, k) / jnp.sqrt(q.shape[-1])
    mask = jnp.tril(jnp.ones((q.shape[1], k.shape[1]), bool))
    return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(jnp.where(mask, scores, -jnp.inf), -1), v)


CASES = {
    "unary": (lambda x: (jnp.exp(x), jnp.log(jnp.abs(x)), jnp.sqrt(jnp.abs(x)), lax.rsqrt(jnp.abs(x)), jnp.tanh(x),
                         jax.nn.sigmoid(x), jnp.sin(x), jnp.cos(x), jnp.floor(x), jnp.ceil(x), jnp.round(x),
                         lax.round(x), jnp.sign(x), -x, jnp.abs(x), jnp.log1p(jnp.abs(x)), jnp.expm1(x),
                         jnp.exp2(x), jnp.cbrt(x), jnp.isfinite(x / (x - x[0, 0])), lax.erf(x)), (r(3, 4),)),
    "binary": (lambda x, y: (x + y, x - y, x * y, x / y, jnp.maximum(x, y), jnp.minimum(x, 0.0), x ** 3, x ** -2,
                             jnp.abs(x) ** y, jnp.square(x), lax.rem(x, y), jnp.clip(x, -0.5, 0.5)),
               (r(3, 4), r(3, 4))),
    "integers": (lambda a, b: (a + b, a * 3, lax.div(a - 2, b + 1), lax.rem(a - 2, b + 1), a // (b + 1),
                               ~a, jnp.maximum(a, b)), (ints(3, 4), ints(3, 4))),
    "compare_select": (lambda x, y: (x < y, x >= 0, x == y, jnp.where(x > y, x, y), (x > 0) & (y > 0),
                                     (x > 0) | (y > 0), ~(x > 0), lax.select_n(ints(3, 4, hi=3), x, y, x * 2)),
                       (r(3, 4), r(3, 4))),
    "casts": (lambda x: (x.astype(jnp.int32), x.astype(jnp.float16), (x > 0).astype(jnp.float32),
                         x.astype(bool), lax.reduce_precision(x, 8, 7), lax.reduce_precision(x, 5, 10)),
              (r(3, 4) * 3,)),
    "activations": (lambda x: (jax.nn.relu(x), jax.nn.gelu(x), jax.nn.gelu(x, approximate=False), jax.nn.silu(x),
                               jax.nn.softplus(x), jax.nn.elu(x), jax.nn.leaky_relu(x), jax.nn.relu6(x),
                               jax.nn.softmax(x), jax.nn.log_softmax(x, 0), jax.nn.logsumexp(x, 1)), (r(3, 4),)),
    "reductions": (lambda x: (x.sum(), x.sum(1), x.max(0), x.min((0, 2)), x.prod(1), x.mean(1), x.var(0),
                              jnp.argmax(x, 1), jnp.argmin(x, 0), (x > 0).any(1), (x > -3).all(), jnp.cumsum(x, 1),
                              lax.cumsum(x, 0, reverse=True)), (r(2, 3, 4),)),
    "shapes": (lambda x: (x.reshape(4, 6), x.T, x.transpose(1, 0, 2), x[None], jnp.squeeze(x[:, :1]),
                          jnp.broadcast_to(x[:, :1], (2, 3, 4)), jnp.concatenate([x, x], 1), x[:, 1:3, ::2],
                          jnp.flip(x, (0, 2)), jnp.pad(x, ((1, 0), (0, 2), (1, 1)), constant_values=2.0),
                          jnp.split(x, [1, 3], axis=2), jnp.stack([x, x], -1), jnp.tile(x, (1, 2, 1)),
                          jnp.arange(6).reshape(2, 3), jnp.tril(x[0]), jnp.expand_dims(x, 1)), (r(2, 3, 4),)),
    "dot_general": (lambda a, b, c, d, e: (a @ b, jnp.einsum("ij,kj->ik", a, d), c @ b,
                                            jnp.einsum("bij,bjk->bik", c, e), jnp.einsum("bij,bkj->bki", c, c),
                                            jnp.dot(a[0], b), jnp.inner(a, d),
                                            (a.astype(jnp.int32) @ b.astype(jnp.int32))),
                    (r(3, 4), r(4, 5), r(2, 4, 4), r(6, 4), r(2, 4, 3))),
    "conv": (lambda x, w, w2: (conv_nhwc(x, w),
                               lax.conv(x.transpose(0, 3, 1, 2), w2, (1, 1), "SAME"),
                               lax.conv_general_dilated(x.transpose(0, 3, 1, 2), w2[:, :1], (1, 1), "VALID",
                                                        feature_group_count=2)),
             (r(1, 6, 6, 2), r(3, 3, 2, 4), r(4, 2, 3, 3))),
    "pooling": (lambda x: (lax.reduce_window(x, -jnp.inf, lax.max, (1, 3, 3, 1), (1, 2, 2, 1), "SAME"),
                           lax.reduce_window(x, 0.0, lax.add, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"),
                           lax.reduce_window(x[:, :, 0, 0], -jnp.inf, lax.max, (1, 3), (1, 2), "VALID")),
                (r(2, 6, 6, 3),)),
    "gather_take": (lambda x, i: (x[i], x[:, i], jnp.take(x, i, axis=1), x[i, 1], x[i, i], x[-1], x[:, -2],
                                  jnp.take_along_axis(x, jnp.argsort(x, 1), 1)), (r(4, 5), np.array([3, -1, 0]))),
    "dynamic_slices": (lambda x, k: (lax.dynamic_slice(x, (k, 1), (2, 3)), lax.dynamic_slice_in_dim(x, k * 3, 2),
                                     lax.dynamic_update_slice(x, jnp.ones((2, 2)), (k, 1)),
                                     lax.dynamic_update_slice(x, jnp.zeros((1, 5)), (k + 9, 0)), x[k]),
                       (r(4, 5), np.int32(1))),
    "scatter": (lambda x, i, v: (x.at[i].set(v), x.at[i].add(v), x.at[1].set(0.0), x.at[:, 2].multiply(2.0),
                                 x.at[i, 1].max(9.0)), (r(4, 5), np.array([3, 0]), r(2, 5))),
    "sorting": (lambda x: (jnp.sort(x, 1), jnp.argsort(x, 0), lax.top_k(x, 2), jnp.sort(x.astype(jnp.int32), 0)),
                (r(4, 5) * 10,)),
    "attention": (attention, (r(2, 5, 4), r(2, 5, 4), r(2, 5, 4))),
    "float16": (lambda x: jax.nn.softmax(x * x + 1), (r(3, 4, dtype=np.float16),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_primitive_matches_jax(name):
    fn, args = CASES[name]
    check(fn, *args)


def test_custom_derivative_rules_and_checkpoints_are_inlined():
    @jax.custom_vjp
    def clip_grad(x):
        return jnp.sin(x)

    clip_grad.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (g * jnp.cos(x),))
    check(lambda x: (clip_grad(x), jax.checkpoint(lambda y: y * 2 + 1)(x), jax.nn.relu(x)), r(5))
