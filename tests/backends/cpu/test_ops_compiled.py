"""Every op case of the registry sweep, compiled by the CPU backend, against the reference interpreter.

Tolerances of compiled vs reference (relative = absolute): f64 1e-9; f32 1e-4 (vectorised exp/tanh/erf
within 2 ulp, reductions summed in another order); f16 1e-2; bf16 2e-2. Integers and bools: exact.
"""
import numpy as np
import pytest

from cuvil.compiler import compile_module
from cuvil.interpreter import interpret
from tests.ops.test_registry_sweep import CASES, build_case

TOLERANCE = {"float64": 1e-9, "float32": 1e-4, "float16": 1e-2, "bfloat16": 2e-2, "complex128": 1e-9,
             "complex64": 1e-4}
# Ops the backend does not compile yet; a case of these must fail (strict), so the list stays honest.
NOT_YET = set()


def assert_matches(got, want, what=""):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, f"{what}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w, err_msg=what)
        else:
            tol = TOLERANCE[w.dtype.name]
            wide = np.complex128 if w.dtype.kind == "c" else np.float64
            np.testing.assert_allclose(g.astype(wide), w.astype(wide), rtol=tol, atol=tol, err_msg=what)


@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.xfail(strict=True, reason="not compiled yet"))
                                  if c.op in NOT_YET else c for c in CASES], ids=[c.name() for c in CASES])
def test_case_compiled_matches_interpreter(case):
    m = build_case(case)
    want = interpret(m, case.inputs)
    got = compile_module(m, target="cpu")(*case.inputs)
    assert_matches(got, want, case.name())
