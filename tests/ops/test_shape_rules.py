"""Shape rules of the reduce and movement ops on symbolic dimensions, and the errors they raise."""
import numpy as np
import pytest

from cuvil.errors import ShapeError
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module
from cuvil.ir.printer import print_module
from cuvil.ir.types import parse_type
from cuvil.ir.verifier import verify


def builder(*types: str) -> Builder:
    return Builder.new_function(Module(), "main", [parse_type(t) for t in types])


def result_types(op: str, types, **attrs) -> list:
    b = builder(*types)
    out = b.emit(op, *b.args, **attrs)
    return [str(v.type) for v in (out if isinstance(out, tuple) else (out,))]


@pytest.mark.parametrize("op, types, attrs, want", [
    ("reshape", ["f32[n,4]"], {"shape": [-1]}, ["f32[4*n]"]),
    ("reshape", ["f32[n,m,6]"], {"shape": ["n", -1, 3]}, ["f32[n,2*m,3]"]),
    ("reshape", ["f32[b,s,8]"], {"shape": ["b", "s", 2, -1]}, ["f32[b,s,2,4]"]),
    ("reshape", ["f32[b,h+1,2]"], {"shape": [-1, "2*h+2"]}, ["f32[b,2*h+2]"]),  # a sum divides a sum
    ("concat", ["f32[n,2]", "f32[m,2]"], {"axis": 0}, ["f32[m+n,2]"]),
    ("concat", ["f32[2,n]", "f32[2,n]", "f32[2,1]"], {"axis": -1}, ["f32[2,2*n+1]"]),
    ("split", ["f32[n,3]"], {"axis": 0, "sizes": [2, "n-2"]}, ["f32[2,3]", "f32[n-2,3]"]),
    ("slice", ["f32[n,3]"], {"starts": [0], "ends": ["n-1"], "axes": [0]}, ["f32[n-1,3]"]),
    ("slice", ["f32[n,3]"], {"starts": [1], "ends": [2 ** 63 - 1], "axes": [0], "steps": [2]}, ["f32[n//2,3]"]),
    ("broadcast_to", ["f32[1,4]"], {"shape": ["b", "n", 4]}, ["f32[b,n,4]"]),
    ("transpose", ["f32[a,b,c]"], {}, ["f32[c,b,a]"]),
    ("reduce_sum", ["f32[n,m,4]"], {"axes": [-1], "keepdims": False}, ["f32[n,m]"]),
    ("reduce_max", ["i32[n,m]"], {}, ["i32[1,1]"]),
    ("argmax", ["f32[n,5]"], {"axis": 1, "keepdims": False}, ["i64[n]"]),
    ("topk", ["f32[n,9]"], {"k": 3}, ["f32[n,3]", "i64[n,3]"]),
    ("gather", ["f32[v,d]", "i64[b,s]"], {"axis": 0}, ["f32[b,s,d]"]),
    ("pad", ["f32[n,m]"], {"pads": [1, 2, 3, 4]}, ["f32[n+4,m+6]"]),
    ("tile", ["f32[n,3]"], {"repeats": [2, 2]}, ["f32[2*n,6]"]),
    ("shape_of", ["f32[n,3,m]"], {}, ["i64[3]"]),
])
def test_symbolic_result_types(op, types, attrs, want):
    assert result_types(op, types, **attrs) == want


def test_iota_and_dim_size_have_symbolic_shapes():
    b = builder("f32[n,3]")
    n = b.args[0].type.shape[0]
    assert str(b.iota(shape=[n, 3], axis=-1).type) == "i64[n,3]"
    assert str(b.dim_size(dim=[2 * n], dtype="f32").type) == "f32[]"


def test_equivalent_attributes_print_alike():
    def program(**attrs):
        b = builder("f32[2,3,4]")
        b.ret(b.reduce_sum(b.args[0], **attrs))
        return print_module(b.module)
    assert program(axes=(-1, 0, 0)) == program(axes=(2, 0))
    assert program() == program(axes=(0, 1, 2))


def test_symbolic_relations_are_recorded_and_checked():
    b = builder("f32[n,2]", "f32[3,k]")
    out = b.concat(*b.args, axis=0)
    b.ret(out)
    assert str(out.type) == "f32[n+3,2]"
    assert [str(r) for r in b.function.constraints] == ["2 == k"]
    verify(b.module)
    assert interpret(b.module, [np.zeros((4, 2), np.float32), np.ones((3, 2), np.float32)])[0].shape == (7, 2)
    with pytest.raises(ShapeError, match="k"):
        interpret(b.module, [np.zeros((4, 2), np.float32), np.ones((3, 5), np.float32)])


def test_dim_size_reads_the_bound_size():
    b = builder("f32[n,4]")
    n = b.args[0].type.shape[0]
    b.ret(b.dim_size(dim=[4 * n + 1]), b.reshape(b.args[0], shape=[-1]))
    size, flat = interpret(b.module, [np.zeros((5, 4), np.float32)])
    assert size == 21 and size.dtype == np.int64 and flat.shape == (20,)


def test_slice_bounds_are_normalised():
    b = builder("f32[5,n]")
    b.ret(b.slice(b.args[0], starts=[-1, -1], ends=[2 ** 63 - 1, -100], axes=[1, 0], steps=[1, -1]))
    text = print_module(b.module)
    assert "starts = [4, n-1], ends = [-6, n], axes = [0, 1], steps = [-1, 1]" in text
    assert "-> (f32[5,1])" in text
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    np.testing.assert_array_equal(interpret(b.module, [x])[0], x[::-1, -1:])


def test_reshape_infers_minus_one_as_a_floor_division_and_requires_it_exact():
    b = builder("f32[n,m]")
    out = b.reshape(b.args[0], shape=[3, -1])
    b.ret(out)
    assert str(out.type) == "f32[3,m*n//3]"
    verify(b.module)
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    np.testing.assert_array_equal(interpret(b.module, [x])[0], x.reshape(3, -1))
    with pytest.raises(ShapeError, match="needs"):
        interpret(b.module, [np.zeros((2, 5), np.float32)])


def test_fixed_slice_bounds_on_a_symbolic_size_are_required_of_every_call():
    """x[2:6] on a size n is not clamped: the function records n >= 6, and a smaller n is refused at the call
    rather than read past its end. The relation prints and parses back."""
    from cuvil.ir.parser import parse_module

    b = builder("f32[n]")
    b.ret(b.slice(b.args[0], starts=[2], ends=[6]))
    assert [str(c) for c in b.function.constraints] == ["n >= 6"]
    verify(b.module)
    assert parse_module(print_module(b.module)).main.constraints == b.function.constraints
    x = np.arange(7, dtype=np.float32)
    np.testing.assert_array_equal(interpret(b.module, [x])[0], x[2:6])
    with pytest.raises(ShapeError, match="needs n >= 6, but the inputs give 4 < 6"):
        interpret(b.module, [x[:4]])


@pytest.mark.parametrize("op, types, attrs, message", [
    ("reshape", ["f32[3,4]"], {"shape": [5, -1]}, "'reshape' cannot infer -1"),
    ("reshape", ["f32[3,4]"], {"shape": [5, 2]}, "'reshape'.*element count"),
    ("reshape", ["f32[n,m]"], {"shape": [-1, -1]}, "'reshape'.*more than one -1"),
    ("reshape", ["f32[n,m]"], {"shape": ["k", -1]}, "'reshape' cannot infer -1"),
    ("concat", ["f32[2,3]", "f32[2,4]"], {"axis": 0}, "'concat' operand 1 dimension 1"),
    ("concat", ["f32[2,3]", "f16[2,3]"], {"axis": 0}, "'concat'.*element type"),
    ("concat", ["f32[2,3]", "f32[2]"], {"axis": 0}, "'concat'.*rank"),
    ("split", ["f32[6,2]"], {"axis": 0, "sizes": [2, 3]}, "'split'.*sum of sizes"),
    ("transpose", ["f32[2,3,4]"], {"perm": [0, 0, 1]}, "'transpose'.*not a permutation"),
    ("broadcast_to", ["f32[3,4]"], {"shape": [4, 4]}, "'broadcast_to'"),
    ("broadcast_to", ["f32[3,4]"], {"shape": [4]}, "'broadcast_to' cannot lower the rank"),
    ("gather", ["f32[3,4]", "f32[2]"], {"axis": 0}, "'gather'.*indices"),
    ("gather_elements", ["f32[3,4]", "i64[2]"], {"axis": 0}, "'gather_elements'.*rank"),
    ("scatter_elements", ["f32[3,4]", "i64[2,2]", "f32[2,3]"], {}, "'scatter_elements' updates"),
    ("topk", ["f32[3,4]"], {"k": 5}, "'topk' k=5"),
    ("argmax", ["f32[3,4]"], {"axis": 2}, "'argmax' axis 2"),
    ("argmin", ["f32[3,0]"], {"axis": 1}, "'argmin'.*empty"),
    ("reduce_sum", ["f32[3,4]"], {"axes": [3]}, "'reduce_sum' axis 3"),
    ("reduce_mean", ["i32[3,4]"], {}, "'reduce_mean'.*element type i32"),
    ("reduce_prod", ["bool[3]"], {}, "'reduce_prod'"),
    ("cumsum", ["f32[]"], {"axis": 0}, "'cumsum'.*rank"),
    ("slice", ["f32[3,4]"], {"starts": [0], "ends": [2], "steps": [0]}, "'slice'.*steps"),
    ("slice", ["f32[3,4]"], {"starts": [0, 0], "ends": [2]}, "'slice'.*same length"),
    ("pad", ["f32[3,4]"], {"pads": [1, 1]}, "'pad' needs 2\\*rank = 4 pads"),
    ("pad", ["f32[3,4]"], {"pads": [-2, 0, -2, 0]}, "'pad'.*below zero"),
    ("tile", ["f32[3,4]"], {"repeats": [2]}, "'tile'"),
    ("dim_size", [], {"dim": [2, 3]}, "'dim_size' takes exactly one dimension"),
    ("iota", [], {"shape": [3], "dtype": "bool"}, "'iota'"),
])
def test_bad_operands_raise_shape_error_naming_the_op(op, types, attrs, message):
    with pytest.raises(ShapeError, match=message):
        result_types(op, types, **attrs)
