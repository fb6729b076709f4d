"""The verifier catches planted faults and names the op and its location."""
import pytest

from cuvil.errors import VerificationError
from cuvil.ir import Builder, Function, Location, Module, Op, TensorType, Value, sym
from cuvil.ir.verifier import verify

from .programs import control_flow_program


def ops_named(m, name):
    return [op for op in m.main.walk() if op.name == name]


def test_valid_program_passes():
    verify(control_flow_program())


def test_use_before_definition():
    m = control_flow_program()
    body = m.main.body.ops
    relu = ops_named(m, "relu")[0]
    body.remove(relu)
    body.insert(0, relu)
    with pytest.raises(VerificationError, match="'relu'.*used before its definition") as e:
        verify(m)
    assert str(e.value.loc) == "model.py:7:4"


def test_dangling_operand():
    m = control_flow_program()
    orphan = Value(TensorType("f32", (sym("n"), 4)), None, 0)
    ops_named(m, "relu")[0].operands[0] = orphan
    with pytest.raises(VerificationError, match="dangling"):
        verify(m)


def test_value_from_another_function():
    m = control_flow_program()
    other = Builder.new_function(m, "other", [TensorType("f32", (sym("n"), 4))], ["y"])
    other.ret(other.args[0])
    ops_named(m, "relu")[0].operands[0] = m.functions["other"].args[0]
    with pytest.raises(VerificationError, match="value of function @other"):
        verify(m)


def test_value_from_inside_a_region_used_outside():
    m = control_flow_program()
    inner = ops_named(m, "neg")[0].results[0]
    m.main.body.ops[-1].operands[0] = inner
    with pytest.raises(VerificationError, match="outside its region"):
        verify(m)


def test_wrong_result_type():
    m = control_flow_program()
    relu = ops_named(m, "relu")[0]
    relu.results[0].type = TensorType("f32", (sym("n"), 5))
    with pytest.raises(VerificationError, match="differ from the shape rule"):
        verify(m)


def test_unknown_attribute_and_wrong_kind():
    m = control_flow_program()
    ops_named(m, "relu")[0].attrs["slope"] = 0.1
    with pytest.raises(VerificationError, match="no attribute 'slope'"):
        verify(m)
    m = control_flow_program()
    ops_named(m, "full")[0].attrs["dtype"] = "f32"  # a string where a DType belongs
    with pytest.raises(VerificationError, match="canonical"):
        verify(m)


def test_mismatched_region():
    m = control_flow_program()
    cond = ops_named(m, "cond")[0]
    else_region = cond.regions[1]
    else_region.ops[-1].operands = []  # else yields nothing while then yields one value
    with pytest.raises(VerificationError, match="'cond'.*else region yields 0 values"):
        verify(m)


def test_region_without_terminator_and_unknown_op():
    m = control_flow_program()
    ops_named(m, "cond")[0].regions[0].ops.pop()
    with pytest.raises(VerificationError, match="does not end with 'yield'"):
        verify(m)
    m = control_flow_program()
    ops_named(m, "relu")[0].name = "frobnicate"
    with pytest.raises(VerificationError, match="unknown op"):
        verify(m)


def test_wrong_region_count_and_missing_return():
    m = control_flow_program()
    ops_named(m, "cond")[0].regions.pop()
    with pytest.raises(VerificationError, match="regions"):
        verify(m)
    m = Module()
    m.add_function(Function("f", []))
    with pytest.raises(VerificationError, match="must end with 'return'"):
        verify(m)


def test_unrecorded_symbolic_relation():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (sym("n"),)), TensorType("f32", (sym("k"),))])
    b.ret(b.add(*b.args))
    verify(m)
    m.main.constraints.clear()
    with pytest.raises(VerificationError, match="needs k == n"):
        verify(m)


def test_terminator_in_the_middle():
    m = control_flow_program()
    body = m.main.body.ops
    ret = Op("return", [], {}, [], (), Location(node="planted"))
    ret.parent = m.main.body
    body.insert(1, ret)
    with pytest.raises(VerificationError, match="no other terminator"):
        verify(m)



def test_an_op_without_the_complex_trait_refuses_complex_operands():
    """A pass that rewires a complex value into `exp` is caught by the verifier, as the builder refuses to make it."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("c64", (3,)), TensorType("f32", (3,))])
    z, x = b.args
    y = b.exp(x)
    b.ret(b.neg(z), y)
    verify(m)
    y.owner.operands = [z]
    y.owner.results[0].type = TensorType("c64", (3,))
    with pytest.raises(VerificationError, match="'exp' does not accept complex operands"):
        verify(m)
