import numpy as np
import pytest

from cuvil.errors import IndexRangeError, ShapeError
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType, sym
from tests.ir.programs import control_flow_program


def test_control_flow_and_symbolic_batch():
    m = control_flow_program()
    for n in (1, 3, 7):
        x = np.linspace(-1, 1, n * 4, dtype=np.float32).reshape(n, 4)
        out, w = interpret(m, [x])
        np.testing.assert_allclose(out, -np.maximum(x * x, 0) * 0.125, rtol=1e-6)
        assert w is m.constants["w"]


def test_while_runs_a_data_dependent_number_of_times():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", ())], ["x"])
    two = b.full(2.0, ())
    limit = b.full(100.0, ())
    (out,) = b.while_loop([b.args[0]], lambda c, v: c.lt(v, limit), lambda c, v: c.mul(v, two))
    b.ret(out)
    assert interpret(m, [np.float32(3)])[0] == 192
    assert interpret(m, [np.float32(500)])[0] == 500


def test_cond_takes_each_branch():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (4,)), TensorType("bool", ())], ["x", "p"])
    x, p = b.args
    (y,) = b.cond(p, lambda t: t.relu(x), lambda e: e.sigmoid(x))
    b.ret(y)
    x = np.array([-1, 0, 1, 2], np.float32)
    np.testing.assert_array_equal(interpret(m, [x, np.bool_(True)])[0], np.maximum(x, 0))
    np.testing.assert_allclose(interpret(m, [x, np.bool_(False)])[0], 1 / (1 + np.exp(-x)), rtol=1e-6)


def test_inputs_are_checked():
    m = Module()
    n = sym("n")
    b = Builder.new_function(m, "main", [TensorType("f32", (n, 2)), TensorType("f32", (n, 2))], ["a", "b"])
    b.ret(b.add(*b.args))
    ok = np.zeros((3, 2), np.float32)
    with pytest.raises(ShapeError, match="element type f32"):
        interpret(m, [ok.astype(np.float64), ok])
    with pytest.raises(ShapeError, match="rank 2"):
        interpret(m, [ok[0], ok])
    with pytest.raises(ShapeError, match="shape f32\\[n,2\\]"):
        interpret(m, [ok, np.zeros((3, 5), np.float32)])
    with pytest.raises(ShapeError, match="takes 2 inputs"):
        interpret(m, [ok])


def test_recorded_relations_are_checked_at_call():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (sym("n"),)), TensorType("f32", (sym("k"),))])
    b.ret(b.add(*b.args))
    with pytest.raises(ShapeError, match="needs k == n"):
        interpret(m, [np.zeros(3, np.float32), np.zeros(4, np.float32)])
    assert interpret(m, [np.ones(3, np.float32), np.ones(3, np.float32)])[0].tolist() == [2, 2, 2]


def test_an_index_out_of_range_names_the_op_and_its_location():
    """The reference raises NumPy's IndexError; the interpreter says which op and node gave the index (and it is
    still an IndexError for the caller's except clauses)."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (3, 2)), TensorType("i64", (1,))], ["x", "i"])
    b.ret(b.gather(b.args[0], b.args[1], axis=0, loc="model.onnx:gather_node"))
    x = np.zeros((3, 2), np.float32)
    with pytest.raises(IndexRangeError, match="'gather': index 5 is out of bounds.*gather_node") as info:
        interpret(m, [x, np.array([5])])
    assert isinstance(info.value, IndexError)
    assert interpret(m, [x, np.array([-3])])[0].shape == (1, 2)


def test_a_relation_on_computed_sizes_is_checked_once_both_are_bound():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (4,)), TensorType("f32", (4,))], ["x", "y"])
    a, c = (b.reshape(b.nonzero(v), shape=(s,)) for v, s in zip(b.args, (sym("u0"), sym("u1"))))
    b.ret(b.add(a, c))
    np.testing.assert_array_equal(interpret(m, [np.ones(4, np.float32), np.ones(4, np.float32)])[0], [0, 2, 4, 6])
    with pytest.raises(ShapeError, match=r"u0=4, u1=2"):
        interpret(m, [np.ones(4, np.float32), np.array([0, 1, 0, 1], np.float32)])
