"""@cuvil.jit on a JAX function called with JAX arrays compiles through the jaxpr."""
import numpy as np
import pytest

import cuvil

jax = pytest.importorskip("jax")
jnp = jax.numpy


@cuvil.jit(target="interpreter")
def block(x, w):
    h = jax.nn.gelu(x @ w)
    return jnp.where(h.mean() > 0.1, h, -h)


def test_jax_arrays_take_the_jaxpr_route():
    x = jnp.asarray(np.random.default_rng(0).standard_normal((4, 8)), jnp.float32)
    w = jnp.asarray(np.random.default_rng(1).standard_normal((8, 3)), jnp.float32)
    got = block(x, w)
    want = jax.jit(block.python_function)(x, w)
    assert type(got).__module__.startswith("jax")
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-5, atol=1e-5)
