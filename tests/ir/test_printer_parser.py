import numpy as np
import pytest

from cuvil.errors import ParseError
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Location, Module, TensorType, sym
from cuvil.ir.parser import parse_module
from cuvil.ir.printer import print_module

from .programs import control_flow_program


def test_round_trip_with_regions_locations_and_constants():
    m = control_flow_program()
    text = print_module(m)
    again = parse_module(text)
    assert print_module(again) == text
    assert np.array_equal(again.constants["w"], m.constants["w"])
    locs = {op.loc for op in again.main.walk()}
    assert Location("model.py", 7, 4) in locs and Location(node="onnx:Less_3") in locs
    x = np.ones((2, 4), np.float32)
    for a, b in zip(interpret(m, [x]), interpret(again, [x])):
        assert np.array_equal(a, b)


def test_text_reads_like_the_docs():
    text = print_module(control_flow_program())
    assert "func @main(%x: f32[n,4]) -> (f32[n,4], f32[4,4]) {" in text
    assert 'loc("model.py":7:4)' in text and "= cond " in text and "^(" in text


def test_elided_constants_do_not_parse_back():
    text = print_module(control_flow_program(), elide_constants_over=4)
    assert "elided" in text
    with pytest.raises(ParseError, match="elided"):
        parse_module(text)


@pytest.mark.parametrize("mutate, message", [
    (lambda t: t.replace("%0:f32[4,4] = constant", "%0:f32[4,5] = constant"), "shape rule gives"),
    (lambda t: t.replace("relu %", "frobnicate %"), "unknown op"),
    (lambda t: t.replace("return %", "return %zz, %"), "undefined value %zz"),
    (lambda t: t.replace('{value = 0.5, shape = [n, 4], dtype = f32}', '{value = 0.5, colour = 1}'), "no attribute"),
    (lambda t: t.replace("module {", "module ["), "expected"),
    (lambda t: t[: len(t) // 2], "unknown op|expected"),
    (lambda t: t[: t.index("return")], "expected"),
    (lambda t: t.replace("-> (f32[n,4], f32[4,4])", "-> (f32[n,4])"), "declares results"),
])
def test_parse_errors_name_the_problem_and_line(mutate, message):
    text = print_module(control_flow_program())
    bad = mutate(text)
    assert bad != text
    with pytest.raises(ParseError, match=message) as e:
        parse_module(bad)
    assert str(e.value.loc).startswith("line ")


def test_complex_types_and_constants_round_trip():
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("c128", (sym("n"), 2))])
    w = b.constant(np.array([[1 + 2j, -np.inf + 0.5j]], np.complex128), "w")
    b.ret(b.mul(b.args[0], b.broadcast_to(w, shape=(sym("n"), 2))), b.real(b.args[0]))
    text = print_module(m)
    assert "c128[n,2]" in text and "f64[n,2]" in text
    again = parse_module(text)
    assert print_module(again) == text
    np.testing.assert_array_equal(again.constants["w"], m.constants["w"])
