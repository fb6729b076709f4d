"""lax.cond / switch / while_loop / fori_loop / scan as regions, symbolic shapes, compile_to_ir, jit, errors."""
from __future__ import annotations

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402
from jax import lax  # noqa: E402

import cuvil  # noqa: E402
from cuvil.frontend import build_ir  # noqa: E402
from cuvil.frontends.jax import jit  # noqa: E402

from .test_primitives import check, r  # noqa: E402


def gated(x, threshold):
    return lax.cond(x.mean() > threshold, jax.nn.relu, jax.nn.sigmoid, x)


def test_cond_takes_both_branches():
    check(gated, r(3, 4) + 2, np.float32(0.5))
    check(gated, r(3, 4) - 2, np.float32(0.5))
    assert "cond %" in cuvil.inspect_ir(cuvil.compile_to_ir(gated, r(3, 4), np.float32(0.5)))


@pytest.mark.parametrize("index", [-1, 0, 1, 2, 5])
def test_switch_clamps_its_index(index):
    branches = [lambda a: a, lambda a: a * 2, lambda a: a + 1]
    check(lambda i, x: lax.switch(i, branches, x), np.int32(index), r(3))


def test_while_loop_with_tuple_state():
    def halve_until_small(x):
        def body(state):
            i, v = state
            return i + 1, v * 0.5
        return lax.while_loop(lambda s: jnp.abs(s[1]).max() > 0.1, body, (0, x))

    check(halve_until_small, r(4) * 10)


def test_fori_loop_and_scan():
    def cumulative(xs):
        def step(carry, x):
            total, count = carry
            return (total + x, count + 1), total * x
        return lax.scan(step, (jnp.zeros(xs.shape[1]), 0), xs)

    check(cumulative, r(5, 3))
    check(lambda xs: lax.scan(lambda c, x: (c * 0.9 + x, jnp.tanh(c)), xs[0], xs, reverse=True), r(4, 2))
    check(lambda x: lax.fori_loop(0, 4, lambda i, v: v * 2 + i, x), r(3))
    check(lambda x, n: lax.fori_loop(0, n, lambda i, v: v + jnp.sin(v), x), r(3), np.int32(3))


def test_scan_without_outputs_and_with_several_inputs():
    def rnn(w, xs, ys):
        def cell(h, xy):
            x, y = xy
            return jnp.tanh(h @ w + x * y), None
        return lax.scan(cell, jnp.zeros(w.shape[0]), (xs, ys))[0]

    check(rnn, r(3, 3), r(6, 3), r(6, 3))


def test_symbolic_shapes_become_symbolic_dims():
    b = jax.export.symbolic_shape("b, 4")
    spec = jax.ShapeDtypeStruct(b, jnp.float32)

    def fn(x):
        return (x.reshape(-1) * 2, x[1:], jnp.concatenate([x, x]), x.shape[0] * 2 + 1, jax.nn.softmax(x, 0),
                x.sum(0))

    module = cuvil.compile_to_ir(fn, spec)
    assert [str(t) for t in module.main.result_types] == ["f32[4*b]", "f32[b-1,4]", "f32[2*b,4]", "i32[]",
                                                           "f32[b,4]", "f32[4]"]
    x = r(5, 4)
    got = cuvil.interpret(module, [x])
    expected = jax.jit(fn)(x)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, np.asarray(e), rtol=1e-5, atol=1e-6)


def test_jit_caches_per_signature_and_returns_the_callers_kind():
    calls = []

    def fn(x, y):
        calls.append(1)
        return {"sum": x + y, "prod": x * y}

    f = jit(fn, target="interpreter")
    out = f(np.ones(3, np.float32), np.ones(3, np.float32))
    assert isinstance(out["sum"], np.ndarray) and out["sum"].tolist() == [2, 2, 2]
    f(np.zeros(3, np.float32), np.ones(3, np.float32))
    assert len(f.cache) == 1
    out = f(jnp.ones(4), jnp.ones(4))
    assert isinstance(out["prod"], jax.Array) and len(f.cache) == 2
    assert "add %x, %y" in cuvil.inspect_ir(f)


def test_python_scalars_and_closed_over_constants():
    table = np.arange(12, dtype=np.float32).reshape(3, 4)
    check(lambda i, s: jnp.asarray(table)[i] * s, np.int32(2), 1.5)
    module = cuvil.compile_to_ir(lambda x: x @ jnp.asarray(table).T, r(2, 4))
    assert any(arr.shape == (3, 4) for arr in module.constants.values())


def test_build_ir_facade_and_argument_names():
    spec = {"images": jax.ShapeDtypeStruct((2, 3), jnp.float32),
            "params": {"w": jax.ShapeDtypeStruct((3,), jnp.float32)}}
    module = build_ir(lambda images, params: images * params["w"], spec)
    assert [a.name for a in module.main.args] == ["images", "params_w"]
    with pytest.raises(cuvil.UnsupportedError, match="not supported"):
        build_ir(lambda x: x, {"x": jax.ShapeDtypeStruct((2,), jnp.float32)}, mode="train")


def test_unsupported_primitive_names_it_and_the_line():
    def fn(x):
        return lax.erf_inv(x)

    with pytest.raises(cuvil.UnsupportedError, match=r"'erf_inv'.*test_control_and_api\.py:\d+"):
        cuvil.compile_to_ir(fn, r(3))


def test_locations_point_at_the_users_lines():
    def fn(x):
        y = jnp.sin(x)
        return y * 2

    module = cuvil.compile_to_ir(fn, r(3))
    sin = next(op for op in module.main.walk() if op.name == "sin")
    assert sin.loc.file == __file__ and sin.loc.node == "jax:sin"


def test_jit_with_dynamic_dims_compiles_once():
    f = jit(lambda x, w: jnp.tanh(x @ w), target="interpreter", dynamic_dims={"x": {0: "batch"}})
    w = r(4, 2)
    for n in (1, 3, 6):
        x = r(n, 4)
        np.testing.assert_allclose(f(x, w), np.tanh(x @ w), rtol=1e-5, atol=1e-6)
    assert len(f.cache) == 1
    assert str(f.module.main.args[0].type) == "f32[batch,4]"


def test_one_step_paths_for_jax_functions():
    """`cuvil.compile(jax_fn, example_inputs)` compiles at once; `cuvil.jit` on a JAX function called with JAX
    arrays goes through the jaxpr; both run like the function."""
    def f(x, y):
        return jnp.tanh(x) * 2 + jnp.sum(y, axis=0)

    x, y = jnp.ones((3, 4), jnp.float32) * 0.5, jnp.arange(8, dtype=jnp.float32).reshape(2, 4)
    compiled = cuvil.compile(f, (x, y))
    assert len(compiled.cache) == 1 and "tanh" in cuvil.inspect_ir(compiled)
    np.testing.assert_allclose(np.asarray(compiled(x, y)), np.asarray(f(x, y)), rtol=1e-6)
    assert len(compiled.cache) == 1  # the call reused what compile built
    np.testing.assert_allclose(np.asarray(cuvil.jit(f)(x, y)), np.asarray(f(x, y)), rtol=1e-6)
