"""Data-dependent sizes in the IR: the symbol an op defines, its bound, the verifier's rules, the text form."""
import numpy as np
import pytest

from cuvil.errors import VerificationError
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType, sym
from cuvil.ir.dynamic import data_sizes
from cuvil.ir.fingerprint import fingerprint
from cuvil.ir.parser import parse_module
from cuvil.ir.printer import print_module
from cuvil.ir.symbolic import grows_with, substitute
from cuvil.ir.verifier import verify


def chained() -> Module:
    """nonzero of a nonzero result, then ops on the computed size."""
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (sym("n"), 3))], ["x"])
    first = b.nonzero(b.args[0])
    second = b.nonzero(first)
    b.ret(b.transpose(first, perm=(1, 0)), second)
    return m


def test_each_op_gets_a_fresh_symbol_and_a_bound_over_the_inputs():
    m = chained()
    assert [str(t) for t in m.main.result_types] == ["i64[u0,2]", "i64[2,u1]"]
    assert data_sizes(m.main) == {"u0": 3 * sym("n"), "u1": 6 * sym("n")}


def test_text_form_round_trips_and_fingerprint_sees_the_symbol():
    m = chained()
    text = print_module(m)
    assert 'nonzero %x {size = "u0"}' in text
    again = parse_module(text)
    verify(again)
    assert print_module(again) == text and fingerprint(again) == fingerprint(m)
    renamed = parse_module(text.replace("u1", "k"))
    assert fingerprint(renamed) != fingerprint(m)


def test_interpreter_binds_the_size_when_the_op_runs():
    x = np.array([[0, 1, 2], [0, 0, 0], [5, 0, 0]], np.float32)
    first, second = interpret(chained(), [x])
    np.testing.assert_array_equal(first, np.argwhere(x))
    assert second.shape == (2, np.count_nonzero(np.nonzero(x)))


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.replace('size = "u1"', 'size = "u0"').replace("u1", "u0"), "which an earlier 'nonzero' defines"),
    (lambda t: t.replace("u0", "n"), "which an input's shape already names"),
])
def test_verifier_refuses_a_size_defined_twice_or_named_by_an_input(edit, message):
    with pytest.raises(VerificationError, match=message):
        verify(parse_module(edit(print_module(chained()))))


def test_substitute_and_monotonicity():
    n, u = sym("n"), sym("u")
    assert substitute(2 * u + 1, {"u": 3 * n}) == 6 * n + 1
    assert substitute((u + 1) // 2, {"u": 4}) == 2
    assert grows_with(2 * u - 1, {"u"}) and grows_with(n - 1, {"u"}) and grows_with((u * n) // 2, {"u"})
    assert not grows_with(n - u, {"u"}) and not grows_with(u % 4, {"u"})


ESCAPING = """module {
  func @main(%x: f32[n]) -> (i64[1,u1]) {
    %0:i64[1,u1] = full {value = 0.0, shape = [1, u1], dtype = i64}
    %1:i64[1,u1] = while %0 {
    ^(%2: i64[1,u1]):
      %3:bool[] = full {value = 1.0, shape = [], dtype = bool}
      yield %3
    } {
    ^(%4: i64[1,u1]):
      %5:i64[1,u1] = nonzero %x {size = "u1"}
      yield %5
    }
    return %1
  }
}
"""


def test_verifier_refuses_a_size_that_leaves_the_region_computing_it():
    """The loop's results would have a size known only inside one iteration (the interpreter met it unbound)."""
    with pytest.raises(VerificationError, match="u1, which its region computes from the data"):
        verify(parse_module(ESCAPING))
