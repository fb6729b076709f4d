"""Small JAX models written with jax.numpy and lax (no flax here), compared with jax.jit on the CPU."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

import cuvil  # noqa: E402

from .test_primitives import check  # noqa: E402


def init(seed: int, *shapes):
    """Scaled normal weights (NumPy's generator: jax.random compiles a kernel per shape, which is slow)."""
    rng = np.random.default_rng(seed)
    return [jnp.asarray(rng.standard_normal(s).astype(np.float32) / np.sqrt(s[0])) for s in shapes]


def mlp(params, x):
    for w, b in params[:-1]:
        x = jax.nn.gelu(x @ w + b)
    w, b = params[-1]
    return jax.nn.log_softmax(x @ w + b)


def cnn(params, x):
    """NHWC conv -> batch norm (inference) -> relu -> max pool, twice; global average pool; dense."""
    for w, scale, shift in params["convs"]:
        x = lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
        x = jax.nn.relu(x * scale + shift)
        x = lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")
    return x.mean((1, 2)) @ params["dense"]


def transformer_block(p, x):
    """Pre-norm causal self-attention and an MLP, 2 heads."""
    def norm(v, g):
        mean = v.mean(-1, keepdims=True)
        return (v - mean) * lax.rsqrt(((v - mean) ** 2).mean(-1, keepdims=True) + 1e-5) * g

    b, t, d = x.shape
    q, k, v = jnp.split(norm(x, p["g1"]) @ p["qkv"], 3, axis=-1)
    heads = [z.reshape(b, t, 2, d // 2).transpose(0, 2, 1, 3) for z in (q, k, v)]
    scores = heads[0] @ heads[1].transpose(0, 1, 3, 2) / np.sqrt(d // 2)
    scores = jnp.where(jnp.tril(jnp.ones((t, t), bool)), scores, jnp.finfo(scores.dtype).min)
    att = (jax.nn.softmax(scores, -1) @ heads[2]).transpose(0, 2, 1, 3).reshape(b, t, d)
    x = x + att @ p["out"]
    return x + jax.nn.gelu(norm(x, p["g2"]) @ p["up"]) @ p["down"]


def test_mlp():
    ws = init(0, (8, 16), (16, 16), (16, 4))
    params = [(w, jnp.full(w.shape[1], 0.1)) for w in ws]
    check(lambda x: mlp(params, x), np.random.default_rng(0).standard_normal((5, 8)).astype(np.float32))


def test_mlp_with_a_symbolic_batch():
    ws = init(1, (8, 16), (16, 4))
    params = [(w, jnp.zeros(w.shape[1])) for w in ws]
    spec = jax.ShapeDtypeStruct(jax.export.symbolic_shape("batch, 8"), jnp.float32)
    module = cuvil.compile_to_ir(lambda x: mlp(params, x), spec)
    assert str(module.main.result_types[0]) == "f32[batch,4]"
    for n in (1, 7):
        x = np.random.default_rng(n).standard_normal((n, 8)).astype(np.float32)
        np.testing.assert_allclose(cuvil.interpret(module, [x])[0], np.asarray(mlp(params, x)), rtol=1e-4, atol=1e-5)


def test_cnn():
    w1, w2 = init(2, (3, 3, 3, 8), (3, 3, 8, 16))
    convs = [(w1, jnp.linspace(0.5, 1.5, 8), jnp.linspace(-0.1, 0.1, 8)),
             (w2, jnp.linspace(0.5, 1.5, 16), jnp.linspace(-0.1, 0.1, 16))]
    params = {"convs": convs, "dense": init(3, (16, 10))[0]}
    x = np.random.default_rng(2).standard_normal((2, 16, 16, 3)).astype(np.float32)
    check(lambda x: cnn(params, x), x)


def test_transformer_block():
    d = 16
    qkv, out, up, down = init(4, (d, 3 * d), (d, d), (d, 4 * d), (4 * d, d))
    p = {"qkv": qkv, "out": out, "up": up, "down": down, "g1": jnp.ones(d), "g2": jnp.ones(d)}
    x = np.random.default_rng(3).standard_normal((2, 6, d)).astype(np.float32)
    check(lambda x: transformer_block(p, x), x)
