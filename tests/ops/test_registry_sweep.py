"""Every op, from its registry declaration: build, verify, print/parse and save/load round trips, fingerprint,
interpret against an independent oracle, and (for composites) the decomposition against the reference."""
import importlib
import pkgutil

import numpy as np
import pytest

import tests.ops as ops_tests
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType, sym
from cuvil.ir.dtypes import DType
from cuvil.ir.fingerprint import fingerprint
from cuvil.ir.parser import parse_module
from cuvil.ir.printer import print_module
from cuvil.ir.serialize import from_bytes, to_bytes
from cuvil.ir.verifier import verify
from cuvil.ops import all_ops, get_op
from cuvil.passes import decompose

from .cases import Case

# Ops exercised by their own tests (they need regions or module constants).
OWN_TESTS = {"constant", "yield", "return", "cond", "while", "fused"}


def _all_cases() -> list[Case]:
    cases = []
    for info in pkgutil.iter_modules(ops_tests.__path__):
        if info.name.startswith("cases_"):
            cases += importlib.import_module(f"tests.ops.{info.name}").CASES
    return cases


CASES = _all_cases()


def build_case(case: Case) -> Module:
    m = Module()
    types = []
    for i, x in enumerate(case.inputs):
        shape = list(np.shape(x))
        for axis, name in (case.dims or {}).get(i, {}).items():
            shape[axis] = sym(name)
        types.append(TensorType(DType.from_numpy(np.asarray(x).dtype), tuple(shape)))
    b = Builder.new_function(m, "main", types)
    out = b.emit(case.op, *b.args, **case.attrs)
    b.ret(*(out if isinstance(out, tuple) else (out,)))
    return m


def assert_close(got, want, case: Case, what: str):
    assert len(got) == len(want), what
    for g, w in zip(got, want):
        w = np.asarray(w)
        assert g.shape == w.shape, f"{what}: shape {g.shape} != {w.shape}"
        if g.dtype.kind in "biu" or w.dtype.kind in "biu":
            np.testing.assert_array_equal(g, w.astype(g.dtype), err_msg=what)
        else:
            rtol, atol = case.tolerance(g.dtype)
            wide = np.complex128 if "c" in g.dtype.kind + w.dtype.kind else np.float64
            np.testing.assert_allclose(g.astype(wide), w.astype(wide), rtol=rtol, atol=atol, err_msg=what)


@pytest.mark.parametrize("case", CASES, ids=[c.name() for c in CASES])
def test_op_case(case: Case):
    m = build_case(case)
    verify(m)
    text = print_module(m)
    again = parse_module(text)
    assert print_module(again) == text
    assert fingerprint(again) == fingerprint(m)
    loaded = from_bytes(to_bytes(m))
    assert print_module(loaded) == text and fingerprint(loaded) == fingerprint(m)
    got = interpret(m, case.inputs)
    if case.expected is not None:
        assert_close(got, case.expected(case.inputs), case, "reference vs oracle")
    if get_op(case.op).is_composite:
        decompose(m)
        verify(m)
        assert all(not get_op(op.name).is_composite for op in m.main.walk())
        assert_close(interpret(m, case.inputs), got, case, "decomposition vs reference")


def test_every_op_has_a_case():
    covered = {c.op for c in CASES}
    missing = sorted(set(all_ops()) - covered - OWN_TESTS)
    assert not missing, f"ops without test cases: {missing}"
