"""Compiled code for data-dependent sizes: kernels after a NonZero read its run-time count, buffers are planned at its
bound, and outputs come back at their real size; equal to the interpreter at some, none and all selected."""
import numpy as np
import pytest

from cuvil.compiler import compile_module
from cuvil.errors import UnsupportedError
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType, Value, sym
from cuvil.passes.memory import buffer_bytes

W = np.arange(12, dtype=np.float32).reshape(3, 4) / 7


def selected_rows() -> Module:
    """x[x > 0] and the rows of x with a positive sum, through elementwise ops, a reduction, gathers and a matmul."""
    m = Module()
    n = sym("n")
    b = Builder.new_function(m, "main", [TensorType("f32", (n, 3))], ["x"])
    x = b.args[0]
    flat = b.reshape(x, shape=(3 * n,))
    picked = b.reshape(b.nonzero(b.gt(flat, b.full(0.0, (3 * n,), "f32"))), shape=(sym("u0"),))
    values = b.gather(flat, picked, axis=0)
    total = b.reduce_sum(b.exp(values), axes=(0,), keepdims=False)
    rows = b.reshape(b.nonzero(b.gt(b.reduce_sum(x, axes=(1,), keepdims=False), b.full(0.0, (n,), "f32"))),
                     shape=(sym("u1"),))
    projected = b.matmul(b.gather(x, rows, axis=0), b.constant(W))
    b.ret(values, total, projected, b.add(b.cast(picked, dtype="f32"), values))
    return m


INPUTS = {
    "some": np.array([[1, -2, 3], [-1, -1, -1], [0, 5, 0.5], [2, 2, -9]], np.float32),
    "none": -np.ones((3, 3), np.float32),
    "all": np.ones((5, 3), np.float32),
    "empty": np.zeros((0, 3), np.float32),
}


@pytest.fixture(scope="module")
def compiled():
    return compile_module(selected_rows())


@pytest.mark.parametrize("name", INPUTS)
def test_compiled_equals_interpreter(compiled, name):
    x = INPUTS[name]
    want = interpret(selected_rows(), [x])
    got = compiled(x)
    assert [g.shape for g in got] == [w.shape for w in want]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got[0], x[x > 0])


def test_repeated_calls_at_other_sizes(compiled):
    rng = np.random.default_rng(0)
    for n in (7, 1, 30, 2):
        x = rng.standard_normal((n, 3)).astype(np.float32)
        got = compiled(x)
        np.testing.assert_array_equal(got[0], x[x > 0])
        np.testing.assert_allclose(got[2], x[x.sum(1) > 0] @ W, rtol=1e-5)


def test_call_into_refuses_outputs_of_unknown_size(compiled):
    with pytest.raises(UnsupportedError, match="computes the sizes u0, u1 from the data"):
        compiled._run.call_into([INPUTS["some"]], [np.empty(0, np.float32)] * 4)


def test_a_relation_between_computed_sizes_is_refused_by_name():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (4,)), TensorType("f32", (4,))], ["x", "y"])
    a, c = (b.reshape(b.nonzero(v), shape=(s,)) for v, s in zip(b.args, (sym("u0"), sym("u1"))))
    b.ret(b.add(a, c))
    with pytest.raises(UnsupportedError, match="data-dependent size u0, u1"):
        compile_module(m)
    np.testing.assert_array_equal(interpret(m, [np.ones(4, np.float32), np.ones(4, np.float32)])[0], [0, 2, 4, 6])


def test_a_buffer_that_shrinks_as_the_size_grows_is_refused():
    n, u = sym("n"), sym("u")
    with pytest.raises(UnsupportedError, match="can shrink as the data-dependent sizes u grow"):
        buffer_bytes(Value(TensorType("f32", (n - u,)), None, 0), {"u": n})
    assert buffer_bytes(Value(TensorType("f32", (u + 1, 2)), None, 0), {"u": 3 * n}) == (24 * n + 71) // 64 * 64


def selected_images() -> Module:
    """A convolution (and the layout passes' blocked form) on the images of a batch that the data selects."""
    m = Module()
    n = sym("n")
    b = Builder.new_function(m, "main", [TensorType("f32", (n, 3, 8, 8))], ["x"])
    x = b.args[0]
    keep = b.reduce_sum(b.reshape(x, shape=(n, 192)), axes=(1,), keepdims=False)
    rows = b.reshape(b.nonzero(b.gt(keep, b.full(0.0, (n,), "f32"))), shape=(sym("u0"),))
    w = b.constant(np.random.default_rng(0).standard_normal((16, 3, 3, 3)).astype(np.float32))
    b.ret(b.relu(b.conv(b.gather(x, rows, axis=0), w, strides=(1, 1), pads=(1, 1, 1, 1))))
    return m


def test_a_convolution_on_selected_images_and_its_profile():
    import cuvil

    m = selected_images()
    exe = compile_module(m)
    rng = np.random.default_rng(1)
    for n in (6, 1, 0):
        x = rng.standard_normal((n, 3, 8, 8)).astype(np.float32)
        (got,), (want,) = exe(x), interpret(m, [x])
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    report = cuvil.profile(exe, rng.standard_normal((6, 3, 8, 8)).astype(np.float32), repeat=2)
    assert any("conv" in " ".join(row.ops) for row in report.rows)


def test_export_refuses_data_dependent_sizes_by_name(compiled, tmp_path):
    from cuvil.backends.cpu import export

    with pytest.raises(UnsupportedError, match=r"computes from the data \(u0, u1\) cannot be exported"):
        export.write(tmp_path / "m.cuv", {"main": (compiled, {})})
