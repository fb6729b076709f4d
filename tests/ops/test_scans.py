"""The scans decomposed into shift-and-combine steps (cummax, cummin, logcumsumexp) need a static axis length."""
import numpy as np
import pytest

from cuvil.errors import UnsupportedError
from cuvil.interpreter import interpret
from cuvil.passes import decompose

from .cases import Case, rand
from .test_registry_sweep import build_case


@pytest.mark.parametrize("op", ["cummax", "cummin", "logcumsumexp"])
def test_symbolic_scan_axis_is_refused_by_name(op):
    m = build_case(Case(op, [rand(3, 4)], {"axis": 1}, dims={0: {1: "n"}}))
    assert len(interpret(m, [rand(3, 4)])) in (1, 2)  # the reference runs at any length
    with pytest.raises(UnsupportedError, match=f"'{op}' along an axis of symbolic size n"):
        decompose(m)


def test_long_line_matches_reference():
    """A line of 1000: ten steps, the last one partial."""
    x = np.random.default_rng(0).standard_normal((2, 1000)).astype(np.float32) * 50
    m = build_case(Case("logcumsumexp", [x], {"axis": 1}))
    want = interpret(m, [x])
    decompose(m)
    np.testing.assert_allclose(interpret(m, [x])[0], want[0], rtol=1e-5, atol=1e-5)
