"""Size relations beyond equality (`Relation`, cuvil/ir/core.py): what windowed ops and the other rules that
subtract or divide record on symbolic sizes, their words, their text form, and the interpreter's check of them
on every call (a ShapeError naming the op, its node or line and the sizes, never NumPy's ValueError)."""
import re

import numpy as np
import pytest

from cuvil.errors import ShapeError
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Location, Module, TensorType, sym
from cuvil.ir.core import Relation
from cuvil.ir.fingerprint import fingerprint
from cuvil.ir.parser import parse_module, parse_relation
from cuvil.ir.printer import format_relation, print_module
from cuvil.ir.verifier import verify

H, W = sym("H"), sym("W")
NODE = Location(node="onnx:Conv_3")


def dilated_depthwise() -> Module:
    """The reliability issue's model: a stride-2 depthwise conv, then a 5x5 one dilated by 4 along the width."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (1, 6, H, W))], ["x"])
    rng = np.random.default_rng(0)
    w1 = b.constant(rng.standard_normal((6, 1, 3, 3)).astype(np.float32), "w1")
    y = b.conv(b.args[0], w1, strides=(2, 2), pads=(1, 1, 1, 1), groups=6, loc=Location(node="onnx:Conv_1"))
    w2 = b.constant(rng.standard_normal((6, 1, 5, 5)).astype(np.float32), "w2")
    z = b.conv(y, w2, dilations=(1, 4), pads=(2, 2, 2, 2), groups=6, loc=NODE)
    b.ret(b.global_avg_pool(z))
    return m


def test_windows_record_that_they_fit():
    m = dilated_depthwise()
    assert [str(r) for r in m.main.constraints] == ["H+2 >= 3", "W+2 >= 3", "(W-1)//2+5 >= 17"]
    assert m.main.constraints[2].loc == NODE
    verify(m)


def test_a_window_wider_than_its_input_is_a_shape_error_naming_node_and_sizes():
    m = dilated_depthwise()
    with pytest.raises(ShapeError) as e:
        interpret(m, [np.zeros((1, 6, 15, 13), np.float32)])
    assert str(e.value) == ("'conv': the dilated 5x5 window spans 17 columns but the padded input has 11 (W=13) "
                            "(at onnx:Conv_3)")
    assert e.value.loc == NODE
    ok = interpret(m, [np.ones((1, 6, 32, 40), np.float32)])[0]
    assert ok.shape == (1, 6, 1, 1) and np.isfinite(ok).all()


@pytest.mark.parametrize("op, attrs, weight, message", [
    ("conv", {"pads": (1, 1, 1, 1)}, (4, 3, 5, 5), "'conv': the 5x5 window spans 5 rows but the padded input has 4"),
    ("conv", {"groups": 3, "dilations": (2, 2)}, (3, 1, 3, 3),
     "'conv': the dilated 3x3 window spans 5 rows but the padded input has 2"),
    ("max_pool", {"kernel": (3, 3)}, None, "'max_pool': the 3x3 window spans 3 rows but the padded input has 2"),
    ("avg_pool", {"kernel": (2, 4), "strides": (2, 2)}, None,
     "'avg_pool': the 2x4 window spans 4 columns but the padded input has 3"),
    ("max_pool", {"kernel": (3, 3), "strides": (2, 2), "ceil_mode": True}, None,
     "'max_pool': the 3x3 window (ceil mode) leaves 0 rows of output"),
    ("conv_transpose", {"pads": (2, 2, 2, 2)}, (3, 2, 3, 3),
     "'conv_transpose': pads [2, 2, 2, 2] leave 0 rows of output (H=2)"),
])
def test_every_windowed_op_refuses_inputs_smaller_than_its_window(op, attrs, weight, message):
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (1, 3, H, W))], ["x"])
    operands = [b.args[0]] + ([b.constant(np.ones(weight, np.float32))] if weight else [])
    b.ret(b.emit(op, *operands, loc=Location("model.py", 7), **attrs))
    verify(m)
    assert parse_module(print_module(m)).main.constraints == m.main.constraints
    small = (1, 3, 1, 3) if op == "max_pool" and attrs.get("ceil_mode") else (1, 3, 2, 3)
    with pytest.raises(ShapeError, match=re.escape(message)) as e:
        interpret(m, [np.zeros(small, np.float32)])
    assert str(e.value).endswith(("=1) (at model.py:7)", "=2) (at model.py:7)", "=3) (at model.py:7)"))
    assert interpret(m, [np.ones((1, 3, 9, 10), np.float32)])[0].size > 0


def test_the_static_rule_says_the_same():
    b = Builder.new_function(Module(), "main", [TensorType("f32", (1, 6, 8, 7))])
    with pytest.raises(ShapeError, match=r"'conv': the dilated 5x5 window spans 17 columns but the padded input "
                                         r"has 11 \(at onnx:Conv_3\)"):
        b.conv(b.args[0], b.constant(np.ones((6, 1, 5, 5), np.float32)), dilations=(1, 4), pads=(2, 2, 2, 2),
               groups=6, loc=NODE)


def test_other_rules_that_subtract_record_their_bounds():
    m = Module()
    n = sym("n")
    b = Builder.new_function(m, "main", [TensorType("f32", (n, 4))], ["x"])
    cropped = b.pad(b.args[0], pads=(-2, 0, 0, 0))
    head, tail = b.split(b.args[0], axis=0, sizes=(n - 3, 3))
    grown = b.resize(b.args[0], sizes=(2 * n, 4))
    b.ret(cropped, head, tail, grown)
    assert [str(r) for r in m.main.constraints] == ["n-2 >= 0", "n-3 >= 0", "2*n >= 1"]  # n >= 1 follows
    verify(m)
    for size, what in [(1, "'pad' pads"), (2, "'split' of f32\\[n,4\\]: piece 0"), (0, "'pad' pads")]:
        with pytest.raises(ShapeError, match=what):
            interpret(m, [np.zeros((size, 4), np.float32)])


def test_a_negative_result_size_is_a_shape_error_even_without_its_relation():
    """The interpreter's backstop: sizes no relation guards still never reach NumPy as a negative size."""
    m = dilated_depthwise()
    m.main.constraints.clear()
    with pytest.raises(ShapeError, match=r"'conv' would give a result of shape .* = \(1, 6, 8, -5\)") as e:
        interpret(m, [np.zeros((1, 6, 15, 13), np.float32)])
    assert e.value.loc == NODE


def test_relations_print_and_parse_back_with_their_words_and_place():
    r = Relation((W - 1) // 2 + 5, ">=", 17, "'conv': [a] \"window\" spans {rhs}, input {lhs}", Location("m.py", 3, 2))
    text = format_relation(r)
    assert text == '(W-1)//2+5 >= 17 "\'conv\': [a] \\"window\\" spans {rhs}, input {lhs}" loc("m.py":3:2)'
    again = parse_relation(text)
    assert (again, again.what, again.loc) == (r, r.what, r.loc)
    assert parse_relation("n == k") == Relation(sym("k"), "==", sym("n"))
    m = dilated_depthwise()
    text = print_module(m)
    assert 'where [H+2 >= 3 "' in text and 'loc("onnx:Conv_3")] {' in text
    back = parse_module(text)
    assert [(str(r), r.what, r.loc) for r in back.main.constraints] == \
        [(str(r), r.what, r.loc) for r in m.main.constraints]
    assert print_module(back) == text


@pytest.mark.parametrize("text, problem", [("n", "expected 'a == b' or 'a >= b'"), ("n >= 3 x", "cannot parse"),
                                           ('n >= 3 "x" y', "unexpected text")])
def test_malformed_relations_are_parse_errors(text, problem):
    with pytest.raises(ValueError, match=problem):
        parse_relation(text)


def test_fingerprint_counts_the_kind_and_sizes_of_a_relation_not_its_words():
    def module(kind, what):
        m = Module()
        b = Builder.new_function(m, "main", [TensorType("f32", (sym("n"),))])
        b.function.add_relation(Relation(sym("n"), kind, 4, what))
        b.ret(b.args[0])
        return m
    assert fingerprint(module(">=", "a")) == fingerprint(module(">=", "b")) != fingerprint(module("==", "a"))


def test_implied_relations_are_not_recorded_twice():
    """X + c >= 0 follows from X + b >= 0 when b <= c, also inside a floor division: a chain of windows on
    the same size records one relation per size, and result sizes the windows imply record none."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (1, 3, H, 8))], ["x"])
    w = b.constant(np.ones((3, 1, 3, 3), np.float32))
    y = b.args[0]
    for _ in range(3):
        y = b.conv(y, w, pads=(1, 1, 1, 1), groups=3)
    y = b.max_pool(y, kernel=(2, 2), strides=(2, 2))
    b.ret(b.relu(y))
    assert [str(r) for r in m.main.constraints] == ["H+2 >= 3", "H >= 2"]
    assert m.main.implies(Relation(H // 2 - 1, ">=", -1)) and not m.main.implies(Relation(H, ">=", 3))
    verify(m)
