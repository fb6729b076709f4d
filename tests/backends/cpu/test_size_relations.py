"""Compiled functions check the size relations of their shape rules on every call, before any native code runs:
the C fast path (fastcall.c's check program, its `ge` instruction) declines the call, the ctypes path raises the
interpreter's ShapeError, and a function loaded from the artifact cache keeps its relations and their words."""
import numpy as np
import pytest

from cuvil.backends.cpu import fastcall
from cuvil.cache import store
from cuvil.compiler import compile_module
from cuvil.errors import ShapeError
from cuvil.interpreter import interpret
from cuvil.ir import Builder, Module, TensorType, sym

from ...ops.test_size_relations import dilated_depthwise

MESSAGE = "'conv': the dilated 5x5 window spans 17 columns but the padded input has 11 (W=13) (at onnx:Conv_3)"
SMALL = np.zeros((1, 6, 15, 13), np.float32)


@pytest.fixture(scope="module")
def compiled():
    m = dilated_depthwise()
    return m, compile_module(m)


def test_the_fast_path_declines_and_the_call_raises_the_interpreters_error(compiled):
    m, exe = compiled
    if exe._run.call_exact is None:
        pytest.skip("the C call path is not built here")
    assert exe._run.call_exact(SMALL) is None
    with pytest.raises(ShapeError) as e:
        exe(SMALL)
    assert str(e.value) == MESSAGE


def test_the_ctypes_path_raises_the_same_error(compiled):
    m, exe = compiled
    with pytest.raises(ShapeError) as e:
        exe._run.call_ctypes([SMALL])
    assert str(e.value) == MESSAGE


@pytest.mark.parametrize("shape", [(1, 6, 32, 40), (1, 6, 1, 25), (1, 6, 5, 26)])  # W=25: just fits
def test_sizes_that_fit_run_on_both_paths(compiled, shape):
    m, exe = compiled
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    want = interpret(m, [x])[0]
    np.testing.assert_allclose(exe(x)[0], want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(exe._run.call_ctypes([x])[0], want, rtol=1e-4, atol=1e-5)


def test_the_check_program_compares_with_ge():
    n = sym("n")
    m = Module()
    b = Builder.new_function(m, "main", [TensorType("f32", (n,))])
    b.ret(b.slice(b.args[0], starts=[2], ends=[6]))
    fn = m.main
    code = fastcall.check_program([a.type for a in fn.args], fn.result_types, ["n"], [(0, 0)], fn.constraints)
    assert fastcall.describe(code).splitlines()[2:7] == ["const 0", "const 1", "sym 0", "mul", "add"]
    assert "ge" in fastcall.describe(code).splitlines()
    exe = compile_module(m)
    x = np.arange(7, dtype=np.float32)
    np.testing.assert_array_equal(exe(x)[0], x[2:6])
    np.testing.assert_array_equal(exe(x[:6])[0], x[2:6])  # n == 6: the bound itself holds
    if exe._run.call_exact is not None:
        assert exe._run.call_exact(x[:5]) is None
    with pytest.raises(ShapeError, match="needs n >= 6, but the inputs give 5 < 6 \\(n=5\\)"):
        exe(x[:5])


def test_a_cached_function_keeps_its_relations_and_their_words(compiled, tmp_path, monkeypatch):
    monkeypatch.setenv("CUVIL_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CUVIL_ARTIFACT_CACHE", "1")
    m, exe = compiled
    assert store.save("k" * 40, exe, {})
    loaded, _ = store.load("k" * 40)
    assert loaded.cache == "hit"
    with pytest.raises(ShapeError) as e:
        loaded(SMALL)
    assert str(e.value) == MESSAGE
    x = np.ones((1, 6, 32, 40), np.float32)
    np.testing.assert_allclose(loaded(x)[0], exe(x)[0])
